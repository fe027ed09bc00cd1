"""The seed papers' baselines (prf, hyde, rar, agr): kept so `kgqr eval` can compare
against them, not offered first to users."""
