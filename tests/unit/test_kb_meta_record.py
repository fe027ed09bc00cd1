"""What a job records in kgqr-meta at its end: only what it did, over the record as it is."""

from __future__ import annotations

from typing import Any

import pytest

from plugin import kb_meta
from plugin.field_map import FieldMap

pytestmark = pytest.mark.unit


class OneRecord:
    """kgqr-meta holding one record (get by id; index over the version read)."""

    def __init__(self, source: dict[str, Any]) -> None:
        self.source = source

    def get(self, index: str, id: str) -> dict[str, Any]:
        return {"_source": self.source, "_seq_no": 1, "_primary_term": 1}

    def index(self, index: str, id: str, body: dict[str, Any], **kwargs: Any) -> None:
        self.source = body


def test_a_sync_records_the_pipeline_onto_the_field_map_as_it_is_then() -> None:
    """A sync wrote back the whole field map it read at its start: a `kb embed` meanwhile
    lost its side vectors' fields and model."""
    embedded = FieldMap(index="team", side_vector_fields=["body"], vector_model="m",
                        dimension=4)  # fmt: skip
    stored = kb_meta.KnowledgeBaseMeta(kb="team", structure=kb_meta.DocumentStructure(),
                                       embedder="m", dimension=4, attached=embedded)  # fmt: skip
    client = OneRecord(stored.model_dump(mode="json"))
    kb_meta.record(client, "team", {"attached": {"default_search_pipeline": "tenants"}})
    now = kb_meta.KnowledgeBaseMeta.model_validate(client.source).attached
    assert now is not None and now.default_search_pipeline == "tenants"
    assert (now.side_vector_fields, now.vector_model, now.dimension) == (["body"], "m", 4)


def test_a_record_keeps_what_a_newer_kgqr_wrote_into_it() -> None:
    """Read, changed and written whole by an older kgqr (a rolling upgrade, a rollback), a
    record lost the fields a newer one had added: a default's history, a field map's."""
    meta = kb_meta.KnowledgeBaseMeta(kb="team", structure=kb_meta.DocumentStructure(),
                                     embedder="m", dimension=4,
                                     attached=FieldMap(index="team"))  # fmt: skip
    stored = meta.model_dump(mode="json")
    stored["routing_rules"] = ["newer"]
    stored["attached"]["team_boosts"] = {"title": 2}
    stored["defaults"] = [{"version": 1, "strategy": "graph", "reason": "r", "set_by": "s",
                           "set_at": "t", "gate": 0.4}]  # fmt: skip
    client = OneRecord(stored)
    kb_meta.record(client, "team", {"document_revision": 2})
    assert client.source["document_revision"] == 2
    assert client.source["routing_rules"] == ["newer"]
    assert client.source["attached"]["team_boosts"] == {"title": 2}
    assert client.source["defaults"][0]["gate"] == 0.4
