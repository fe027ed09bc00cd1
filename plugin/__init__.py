"""kgqr plugin."""
