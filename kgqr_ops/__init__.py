"""Running kgqr: the local services, the nginx front, smoke checks and the `kgqr` CLI.
The top layer: it may import anything, nothing imports it (tests/unit/test_layers.py)."""
