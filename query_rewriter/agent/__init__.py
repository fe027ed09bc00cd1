"""The agent retriever: plans over a knowledge base's operations, run and optimised."""
