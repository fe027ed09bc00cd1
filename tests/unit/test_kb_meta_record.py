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


def test_a_rollback_rolls_back_the_version_it_is_written_over() -> None:
    """It chose the version to restore from its first read: with another landed before
    its write, it restored the version before the one it had read as current, not the
    one before the current it was written over."""
    from opensearchpy.exceptions import ConflictError

    def default(version: int, strategy: str) -> dict[str, Any]:
        return {"version": version, "strategy": strategy, "reason": "r", "set_by": "s",
                "set_at": "t"}  # fmt: skip

    class Indices:
        def put_index_template(self, name: str, body: dict[str, Any]) -> None: ...
        def exists(self, index: str) -> bool:
            return False

    class Racing(OneRecord):
        """kgqr-meta where a set-default lands between the rollback's first read and write."""

        indices = Indices()
        seq_no = 1

        def exists(self, index: str, id: str) -> bool:
            return True

        def get(self, index: str, id: str) -> dict[str, Any]:
            return {"_source": self.source, "_seq_no": self.seq_no, "_primary_term": 1}

        def update(self, index: str, id: str, body: dict[str, Any], if_seq_no: int,
                   **kwargs: Any) -> None:  # fmt: skip
            if self.seq_no == 1:  # the set-default lands first
                landed = [*self.source["defaults"], default(3, "base")]
                self.source = {**self.source, "defaults": landed}
                self.seq_no = 2
            if if_seq_no != self.seq_no:
                raise ConflictError(409, "version_conflict_engine_exception", {})
            self.source = {**self.source, **body["doc"]}

    meta = kb_meta.KnowledgeBaseMeta(kb="team", structure=kb_meta.DocumentStructure(),
                                     embedder="m", dimension=4)  # fmt: skip
    stored = meta.model_dump(mode="json")
    stored["defaults"] = [default(1, "graph"), default(2, "graph_walk")]
    client = Racing(stored)
    rolled = kb_meta.roll_back_default(client, "team", None, "test")
    assert (rolled.version, rolled.strategy) == (4, "graph_walk")  # v3's predecessor


def test_a_merged_structure_keeps_what_a_newer_kgqr_wrote_into_it() -> None:
    stored = kb_meta.DocumentStructure.model_validate(
        {"types": {"movie": ["title"]}, "relations": [], "aliases": {"film": "movie"}}
    )
    merged = stored.merge(kb_meta.DocumentStructure(types={"person": ["name"]}))
    assert merged.model_dump()["aliases"] == {"film": "movie"}
    assert set(merged.types) == {"movie", "person"}
