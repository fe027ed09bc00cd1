"""Keys a team's relations name, matched to `_id`s by the engine's own reading of them."""

from __future__ import annotations

from typing import Any

from ingest.document_keys import DocumentKeys

INDEX = "team-keys-as-numbers"


def test_a_numeric_id_field_matches_keys_by_number(opensearch: Any) -> None:
    """A table whose id column had a gap exports its ids as floats: the engine matches
    the key "12" to a stored 12.0, and kgqr read that as "names no document"."""
    opensearch.indices.delete(index=INDEX, ignore=[404])
    mappings = {"properties": {"code": {"type": "long"}, "sku": {"type": "keyword"}}}
    opensearch.indices.create(index=INDEX, body={"mappings": mappings})
    try:
        for doc_id, code, sku in (("a", 12.0, "12.0"), ("b", 13, "13"), ("c", 2**60 + 1, "x")):
            opensearch.index(index=INDEX, id=doc_id, body={"code": code, "sku": sku})
        opensearch.indices.refresh(index=INDEX)
        numbers = DocumentKeys(opensearch, INDEX, "code")
        found = numbers.ids_of({"12", "13.0", "014", str(2**60 + 1), str(2**60)})
        assert found == {"12": ["a"], "13.0": ["b"], "014": [], str(2**60 + 1): ["c"],
                         str(2**60): []}  # fmt: skip
        # A keyword field matches text as text: "12" is not "12.0" there.
        assert DocumentKeys(opensearch, INDEX, "sku").ids_of({"12", "13"}) == {
            "12": [],
            "13": ["b"],
        }
    finally:
        opensearch.indices.delete(index=INDEX, ignore=[404])
