"""kgqr's side vectors: packed small enough to read a search's worth by id, and scored as
the engine's cosinesimil k-NN scores, so the hybrid weighs them as it would a k-NN side."""

from __future__ import annotations

import numpy as np

from kgqr_core import packed_vectors
from query_rewriter.search.side_vectors import VisibleVectors


def test_a_packed_vector_keeps_its_direction_in_a_third_of_the_json() -> None:
    vector = np.random.default_rng(3).standard_normal(384).astype(np.float32)
    back = packed_vectors.unpack(packed_vectors.pack(vector))
    cosine = back @ vector / (np.linalg.norm(back) * np.linalg.norm(vector))
    assert back.shape == (384,) and cosine > 0.9999
    assert len(packed_vectors.pack(vector)) < len(str(vector.round(6).tolist())) / 3


def test_scores_are_the_engines_cosine_scores_and_none_without_vectors() -> None:
    rows = np.asarray([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], np.float32)
    found = VisibleVectors("kgqr-kb-vectors", 5, ["a", "b", "c"], rows)
    scores = found.scores(np.asarray([2.0, 0.0], np.float32))
    assert scores == {"a": 1.0, "b": 0.5, "c": 0.0}
    assert found.explained() == {"index": "kgqr-kb-vectors", "candidates": 5, "scored": 3}
    assert VisibleVectors("i", 2, [], np.zeros((0, 0), np.float32)).scores(rows[0]) == {}
