"""The one seam to OpenSearch: every request made for a caller (or for kgqr's own
bookkeeping) is sent here, the hybrid body is built here, and the engine's answers and
errors are read here. Below everything else of the read path: it knows the query DSL,
not strategies."""
