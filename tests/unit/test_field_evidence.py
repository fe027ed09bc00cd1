"""Field evidence: an edge read from a document's fields is usable only by a caller whose
own fetch of the document shows what it was read from, whichever way the engine keeps the
rest from them (a hidden field, a masked value) or the document has changed since."""

from __future__ import annotations

from kgqr_core.field_evidence import FieldEvidence, digest, evidence_of
from query_rewriter.search.evidence import text_shown

BRAND = FieldEvidence.of_value("d1", "meta.brand", "Acme")


def test_a_value_edge_is_shown_by_the_value_among_the_fields_values() -> None:
    assert BRAND.shown_in({"meta": {"brand": "Acme"}})
    assert BRAND.shown_in({"meta": {"brand": ["Zeta", "Acme"]}})


def test_a_value_edge_is_not_shown_by_a_hidden_masked_or_changed_field() -> None:
    assert not BRAND.shown_in({})  # field-level security left the field out
    assert not BRAND.shown_in({"meta": {"brand": digest("Acme")}})  # masked
    assert not BRAND.shown_in({"meta": {"brand": "Zeta"}})  # changed since the graph
    assert not BRAND.shown_in(None)  # the document itself is hidden


def test_a_text_edge_needs_every_field_it_read_to_show_as_it_was_read() -> None:
    read = {"body": "Anna was born in Oslo.", "title": "Anna"}
    evidence = FieldEvidence.of_text("d1", ["body", "title"], read)
    assert evidence.shown_in(dict(read))
    assert not evidence.shown_in({"title": "Anna"})  # body hidden: its triples with it
    assert not evidence.shown_in({"body": "Anna was born in Oslo."})
    # A field that was empty when read hides nothing the triples came from.
    empty_title = FieldEvidence.of_text("d1", ["body", "title"], {"body": "Oslo."})
    assert empty_title.shown_in({"body": "Oslo."})


def test_evidence_round_trips_through_its_stored_form_and_is_no_document_id() -> None:
    assert FieldEvidence.stored(BRAND.as_stored()) == BRAND
    assert evidence_of(BRAND.as_stored()) == BRAND
    assert evidence_of("p7") == "p7" and evidence_of(None) is None
    # A document whose id spells a stored evidence is still a document to read.
    assert evidence_of(str(BRAND.as_stored())) != BRAND


def test_the_text_a_hit_showed_is_read_in_its_objects_too() -> None:
    """A hit's text was read from its top-level strings only: an attached index's
    `metadata.title` (LangChain's) was left out, so a cached rewrite quoting it was served
    after a role came to hide or mask that field alone."""
    source = {"content": "Heat.", "vector": [0.1, 0.2], "metadata": {"title": "Heat", "year": 1995},
              "cast": [{"name": "Al Pacino"}, {"name": "De Niro"}]}  # fmt: skip
    hit = {"_id": "d1", "_source": source}
    shown = text_shown(hit)
    assert shown is not None
    assert shown.fields == ("cast.name", "content", "metadata.title")
    assert shown.shown_in(source)
    masked = {**source, "metadata": {"title": "9f86d081", "year": 1995}}
    assert not shown.shown_in(masked)
    assert text_shown({"_id": "d2", "_source": {"year": 1995}}) is None
