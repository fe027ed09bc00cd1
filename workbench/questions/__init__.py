"""Judged relational questions synthesised from a knowledge base (exact answers from the
graph), optionally re-phrased by the LLM."""
