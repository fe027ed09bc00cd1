"""kgqr's shared core: settings, connections, the LLM and embedder clients, prompts, ids.
It imports nothing else of kgqr; everything else may import it
(tests/unit/test_layers.py)."""
