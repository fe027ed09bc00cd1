"""kgqr ingest."""
