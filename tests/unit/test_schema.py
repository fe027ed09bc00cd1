from __future__ import annotations

import pytest

from plugin import schema


def test_templates_carry_the_embedder_dimension_and_lucene_engine() -> None:
    templates = schema.index_templates(dimension=384)
    vector = templates["kgqr-documents"]["template"]["mappings"]["properties"]["vector"]
    assert vector["dimension"] == 384
    assert vector["method"]["engine"] == "lucene"
    assert templates["kgqr-triples"]["index_patterns"] == ["kgqr-*-triples"]


def test_hybrid_pipeline_weights_are_numbers() -> None:
    processor = schema.hybrid_pipeline((0.3, 0.7))["phase_results_processors"][0]
    weights = processor["normalization-processor"]["combination"]["parameters"]["weights"]
    assert weights == [0.3, 0.7]


@pytest.mark.parametrize(
    ("relation", "expected"),
    [("directed by", "DIRECTED_BY"), ("associated with", "ASSOCIATED_WITH"),
     ("ppi", "PPI"), ("2nd-order", "R_2ND_ORDER"), ("x`) DETACH DELETE n //", "X_DETACH_DELETE_N"),
     ("директор", "ДИРЕКТОР"), ("監督 of", "監督_OF"), ("`電影`", "電影")],
)  # fmt: skip
def test_relation_types_are_safe_cypher_identifiers(relation: str, expected: str) -> None:
    assert schema.relation_type(relation) == expected


def test_node_labels_from_types() -> None:
    assert schema.node_label("gene/protein") == "Gene_protein"
    assert schema.node_label("電影") == "電影"
    with pytest.raises(ValueError):
        schema.node_label("///")


def test_a_record_whose_type_cannot_name_a_graph_type_is_refused_before_any_write() -> None:
    from pydantic import ValidationError

    from ingest.records import Document, Relation

    assert Document(id="d", type="映画").type == "映画"
    assert Relation(source="a", type="режиссёр", target="b").type == "режиссёр"
    with pytest.raises(ValidationError, match="no letters or digits"):
        Document(id="d", type="///")
    with pytest.raises(ValidationError, match="no letters or digits"):
        Relation(source="a", type="--", target="b")


def test_kb_names_must_be_index_safe() -> None:
    assert schema.documents_index("musique-dev") == "kgqr-musique-dev-documents"
    with pytest.raises(ValueError, match="invalid knowledge-base name"):
        schema.documents_index("Bad Name")


def test_neo4j_statements_are_split_without_comments() -> None:
    statements = schema.neo4j_statements()
    assert statements[0].startswith("CREATE CONSTRAINT kgqr_node_key")
    assert all("//" not in statement for statement in statements)


def test_a_kb_name_with_a_trailing_newline_is_refused() -> None:
    # `$` matches before a final newline: `kb=a%0A` passed the check and was a 500.
    with pytest.raises(ValueError):
        schema.documents_index("a\n")


def test_kgqr_meta_gets_only_the_fields_it_has_not_mapped() -> None:
    """A field an older kgqr-meta let the engine map first (`document_revision` as long)
    made the whole update a 400, and every later field the engine's to map."""
    from plugin.schema import META_INDEX, meta_mapping_update

    mapped = {"kb": {"type": "keyword"}, "document_revision": {"type": "long"}}
    older = {META_INDEX: {"mappings": {"properties": mapped}}}
    update = meta_mapping_update(older)
    assert update["dynamic"] is False
    assert "document_revision" not in update["properties"] and "kb" not in update["properties"]
    assert update["properties"]["defaults"] == {"type": "object", "enabled": False}
    assert meta_mapping_update({META_INDEX: {"mappings": {}}})["properties"]["kb"] == {
        "type": "keyword"
    }
