"""kgqr's side vectors as the side index stores them: float16, little-endian, base64 (a
`binary` field). A search reads up to a hundred or more of them by id; as JSON floats
they were ~9 bytes a dimension, packed they are under 3, and float16 changes a cosine in
its fourth decimal at most.
"""

from __future__ import annotations

import base64

import numpy as np

DTYPE = np.dtype("<f2")


def pack(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, DTYPE).tobytes()).decode("ascii")


def unpack(packed: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(packed), DTYPE).astype(np.float32)
