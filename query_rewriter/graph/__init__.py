"""The knowledge graph as the read path sees it: the Neo4j store, and the in-memory
copies the proxy keeps of small graphs so a lookup costs no round trip."""
