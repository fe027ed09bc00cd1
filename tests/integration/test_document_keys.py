"""Keys a team's relations name, matched to `_id`s by the engine's own reading of them."""

from __future__ import annotations

from typing import Any

from ingest.document_keys import DocumentKeys

INDEX = "team-keys-as-numbers"


def test_a_numeric_id_field_matches_keys_by_number(opensearch: Any) -> None:
    """A table whose id column had a gap exports its ids as floats: the engine matches
    the key "12" to a stored 12.0, and kgqr read that as "names no document"."""
    opensearch.indices.delete(index=INDEX, ignore=[404])
    keyword = {"type": "keyword"}
    mappings = {"properties": {"code": {"type": "long"}, "sku": keyword, "label": keyword}}
    opensearch.indices.create(index=INDEX, body={"mappings": mappings})
    try:
        for doc_id, code, sku in (("a", 12.0, "12.0"), ("b", 13, "13"), ("c", 2**60 + 1, "x")):
            label = code if doc_id == "b" else sku  # b's keyword field holds a JSON number
            body = {"code": code, "sku": sku, "label": label}
            opensearch.index(index=INDEX, id=doc_id, body=body)
        opensearch.indices.refresh(index=INDEX)
        numbers = DocumentKeys(opensearch, INDEX, "code")
        found = numbers.ids_of({"12", "13.0", "014", str(2**60 + 1), str(2**60)})
        assert found == {"12": ["a"], "13.0": ["b"], "014": [], str(2**60 + 1): ["c"],
                         str(2**60): []}  # fmt: skip
        # A keyword field matches text as text: "12" is not "12.0" there, and a number
        # stored in one is found by its own spelling alone (13, not "013").
        assert DocumentKeys(opensearch, INDEX, "sku").ids_of({"12", "13"}) == {
            "12": [],
            "13": ["b"],
        }
        assert DocumentKeys(opensearch, INDEX, "label").ids_of({"13", "013"}) == {
            "13": ["b"],
            "013": [],
        }
    finally:
        opensearch.indices.delete(index=INDEX, ignore=[404])
