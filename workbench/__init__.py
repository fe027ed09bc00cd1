"""The relevance workbench: evaluation, the tuning page, question synthesis and the
agent's plan optimisation. It calls the read path's public interface; the read path never
imports it (tests/unit/test_layers.py)."""
