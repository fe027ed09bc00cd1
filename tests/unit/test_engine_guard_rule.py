"""Which vector mappings the local node cannot run (the Python side of the engine guard,
used to name indices made before the guard)."""

from __future__ import annotations

from kgqr_ops.services.opensearch_guard import unrunnable_fields

LUCENE = {"type": "knn_vector", "dimension": 3, "method": {"name": "hnsw", "engine": "lucene"}}


def test_faiss_nmslib_and_models_are_unrunnable_lucene_is_not() -> None:
    mapping = {
        "properties": {
            "a": {"type": "knn_vector", "dimension": 3, "method": {"engine": "FAISS"}},
            "b": LUCENE,
            "nested": {"properties": {"c": {"type": "knn_vector", "model_id": "m"}}},
            "text": {"type": "text", "fields": {"v": {**LUCENE, "method": {"engine": "nmslib"}}}},
        }
    }
    assert unrunnable_fields(mapping, knn_enabled=False) == [
        "a (engine FAISS)",
        "nested.c (engine faiss)",
        "text.v (engine nmslib)",
    ]


def test_a_field_without_an_engine_is_faiss_only_where_knn_is_on() -> None:
    mapping = {"properties": {"v": {"type": "knn_vector", "dimension": 3}}}
    assert unrunnable_fields(mapping, knn_enabled=False) == []
    assert unrunnable_fields(mapping, knn_enabled=True) == ["v (engine faiss)"]


def test_dynamic_templates_are_read() -> None:
    mapping = {"dynamic_templates": [{"vectors": {"match": "vec_*", "mapping": {
        "type": "knn_vector", "method": {"engine": "faiss"}}}}]}  # fmt: skip
    assert unrunnable_fields(mapping, knn_enabled=False) == ["vectors (engine faiss)"]
