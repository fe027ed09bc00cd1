"""kgqr query_rewriter."""
