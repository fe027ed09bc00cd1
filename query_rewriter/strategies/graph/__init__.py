"""Strategies that read the graph without an LLM: `graph` (bridges from the plain
query's first hit) and `graph_walk` (Personalized PageRank from the query's entities)."""
