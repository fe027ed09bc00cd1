"""The read path: the proxy in front of OpenSearch that rewrites searches on kgqr's
knowledge bases. A search flows proxy -> search -> strategies -> graph, and every request
made for a caller leaves through engine (docs/architecture.md, "The read path")."""
