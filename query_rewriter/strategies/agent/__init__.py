"""The `agent` strategy: stored retrieval plans over a knowledge base's operations,
routed by question shape and run without an LLM at search time. The plans are written
offline by the workbench (workbench/agent_plans)."""
