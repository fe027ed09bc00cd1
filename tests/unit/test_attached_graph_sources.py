"""The graph sources of an attached index: a relations file and the index's own keyword
fields, each line or value that cannot be an edge set aside with its reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from ingest.records import Link, Rejected
from ingest.sources import open_source
from ingest.sources.attached_graph import IndexFieldsSource
from kgqr_core.field_evidence import FieldEvidence, field_values, source_paths
from plugin.field_map import FieldMap


def test_a_relations_file_gives_links_and_sets_bad_lines_aside(tmp_path: Path) -> None:
    edges = tmp_path / "edges.jsonl"
    edges.write_text(
        '{"source": "d1", "relation": "cites", "target": "d2"}\n'
        '{"source": "d1", "type": "made by", "entity": "Acme"}\n'
        '{"source": "d3", "relation": "cites"}\n'
        "not json\n"
        '["a list"]\n'
    )
    records = list(open_source(f"relations:{edges}").records())
    assert records[:2] == [
        Link(source="d1", type="cites", target="d2"),
        Link(source="d1", type="made by", entity="Acme"),
    ]
    assert [type(r) for r in records[2:]] == [Rejected] * 3
    assert "exactly one of `target`" in records[2].reason  # type: ignore[union-attr]
    assert records[2].reason.startswith("edges.jsonl:3:")  # type: ignore[union-attr]


def test_a_link_has_one_end() -> None:
    with pytest.raises(ValidationError, match="exactly one"):
        Link(source="d1", type="cites", target="d2", entity="Acme")


def test_field_values_read_dotted_paths_lists_and_skip_blanks() -> None:
    source = {"metadata": {"brand": "Acme", "tags": ["a", "", None, 3]}}
    assert field_values(source, "metadata.brand") == ["Acme"]
    assert field_values(source, "metadata.tags") == ["a", "3"]
    assert field_values(source, "metadata.missing") == []


SHOP_MAPPING: dict[str, Any] = {"properties": {
    "meta": {"properties": {"brand": {"type": "keyword"}}},
    "cites": {"type": "keyword"},
    "maker": {"type": "text", "fields": {"keyword": {"type": "keyword"}}},
    "authors": {"type": "nested", "properties": {"name": {"type": "keyword"}}},
    "meta.category": {"type": "keyword"},
}}  # fmt: skip


def test_field_values_read_as_the_engine_reads_a_documents_fields() -> None:
    """A multi-field's value is its parent's, a list of objects holds one per object, and
    a key may hold dots: each gave no value (and so no edge, and nothing set aside)."""
    source = {"maker": "Acme", "authors": [{"name": "Ann"}, {"name": "Bo"}, {}],
              "meta.category": "gear", "meta": {"brand": "Zeta"}}  # fmt: skip
    assert field_values(source, "maker.keyword") == ["Acme"]
    assert field_values(source, "authors.name") == ["Ann", "Bo"]
    assert field_values(source, "meta.category") == ["gear"]
    assert field_values(source, "meta.brand") == ["Zeta"]
    assert field_values(source, "maker.keyword.other") == ["Acme"]
    assert field_values({"maker": {"name": "x"}}, "maker.keyword") == []
    # What a fetch must ask for: `_source: ["maker.keyword"]` returns nothing.
    assert source_paths(["maker.keyword", "authors.name"]) == [
        "authors", "authors.name", "maker", "maker.keyword"]  # fmt: skip


def test_a_multi_fields_edges_are_named_after_the_field_it_indexes() -> None:
    fields = FieldMap(index="shop", entity_fields=["maker.keyword", "authors.name"])
    source = IndexFieldsSource(None, fields, mapping=SHOP_MAPPING)
    doc = {"maker": "Acme", "authors": [{"name": "Ann"}]}
    links = [link for link in source.links_of("d1", doc) if isinstance(link, Link)]
    assert [(link.type, link.entity) for link in links] == [("maker", "Acme"), ("name", "Ann")]
    assert source.structure().relations == ["maker", "name"]
    assert all(FieldEvidence.stored(link.evidence or []).shown_in(doc) for link in links)


def test_keyword_fields_become_entity_and_reference_links() -> None:
    fields = FieldMap(index="shop", entity_fields=["meta.brand"], reference_fields=["cites"])
    source = IndexFieldsSource(None, fields, mapping=SHOP_MAPPING)
    doc: dict[str, Any] = {"meta": {"brand": ["Acme", "Zeta"]}, "cites": "d2"}
    links = list(source.links_of("d1", doc))
    assert [link.model_copy(update={"evidence": None}) for link in links] == [
        Link(source="d1", type="brand", entity="Acme"),
        Link(source="d1", type="brand", entity="Zeta"),
        Link(source="d1", type="cites", target="d2"),
    ]
    # Each edge needs a caller to see the value it was read from, and only that one.
    evidence = [FieldEvidence.stored(link.evidence or []) for link in links]  # type: ignore[union-attr]
    assert [e.fields for e in evidence] == [("meta.brand",), ("meta.brand",), ("cites",)]
    assert all(e.shown_in(doc) for e in evidence)
    only_acme = {"meta": {"brand": "Acme"}}
    assert [e.shown_in(only_acme) for e in evidence] == [True, False, False]
    too_long = list(source.links_of("d1", {"cites": "x" * 600}))
    assert isinstance(too_long[0], Rejected) and "512" in too_long[0].reason
    assert source.structure().relations == ["brand", "cites"]
