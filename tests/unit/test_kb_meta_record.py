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


def _default(version: int, strategy: str, **more: Any) -> dict[str, Any]:
    return {"version": version, "strategy": strategy, "reason": f"r{version}", "set_by": "s",
            "set_at": "t", **more}  # fmt: skip


class _MetaIndices:
    def put_index_template(self, name: str, body: dict[str, Any]) -> None: ...
    def exists(self, index: str) -> bool:
        return False


class Defaults(OneRecord):
    """kgqr-meta holding one knowledge base's record, its defaults written by update."""

    indices = _MetaIndices()
    seq_no = 1

    def __init__(self, defaults: list[dict[str, Any]]) -> None:
        meta = kb_meta.KnowledgeBaseMeta(kb="team", structure=kb_meta.DocumentStructure(),
                                         embedder="m", dimension=4)  # fmt: skip
        super().__init__({**meta.model_dump(mode="json"), "defaults": defaults})

    def exists(self, index: str, id: str) -> bool:
        return True

    def get(self, index: str, id: str) -> dict[str, Any]:
        return {"_source": self.source, "_seq_no": self.seq_no, "_primary_term": 1}

    def update(self, index: str, id: str, body: dict[str, Any], if_seq_no: int,
               **kwargs: Any) -> None:  # fmt: skip
        self.source = {**self.source, **body["doc"]}
        self.seq_no += 1


def test_a_rollback_rolls_back_the_version_it_is_written_over() -> None:
    """It chose the version to restore from its first read: with another landed before
    its write, it restored the version before the one it had read as current, not the
    one before the current it was written over."""
    from opensearchpy.exceptions import ConflictError

    class Racing(Defaults):
        """A set-default lands between the rollback's first read and write."""

        def update(self, index: str, id: str, body: dict[str, Any], if_seq_no: int,
                   **kwargs: Any) -> None:  # fmt: skip
            if self.seq_no == 1:  # the set-default lands first
                self.source = {
                    **self.source,
                    "defaults": [*self.source["defaults"], _default(3, "base")],
                }
                self.seq_no = 2
            if if_seq_no != self.seq_no:
                raise ConflictError(409, "version_conflict_engine_exception", {})
            super().update(index, id, body, if_seq_no)

    client = Racing([_default(1, "graph"), _default(2, "graph_walk")])
    rolled = kb_meta.roll_back_default(client, "team", None, "test")
    assert (rolled.version, rolled.strategy) == (4, "graph_walk")  # v3's predecessor


def test_rollbacks_one_after_another_step_back_through_the_history() -> None:
    """v1 A, v2 B, v3 C: the first rollback served B as v4; the second rolled back v4,
    to v3, and served C, the default rolled back from, again."""
    client = Defaults([_default(1, "base"), _default(2, "graph"), _default(3, "graph_walk")])
    first = kb_meta.roll_back_default(client, "team", None, "test")
    assert (first.version, first.strategy, first.restores) == (4, "graph", 2)
    second = kb_meta.roll_back_default(client, "team", None, "test")
    assert (second.version, second.strategy, second.restores) == (5, "base", 1)
    assert second.reason == "rollback to v1 (r1)"
    with pytest.raises(kb_meta.NoSuchDefault, match="stands for v1, its first"):
        kb_meta.roll_back_default(client, "team", None, "test")
    again = kb_meta.roll_back_default(client, "team", 4, "test")  # v4 repeats v2
    assert (again.strategy, again.restores, again.reason) == ("graph", 2, "rollback to v2 (r2)")


def test_a_rollback_to_a_default_this_kgqr_cannot_run_is_refused_not_recorded() -> None:
    """It was recorded, and the proxy then served its own default in its place, while
    `kb show` called the recorded one served."""
    from query_rewriter.search.plan import default_problem

    client = Defaults([_default(1, "graph", params={"graph.weight": 5.0}), _default(2, "base")])
    with pytest.raises(kb_meta.UnusableDefault, match=r"v1 is not one this kgqr runs \("):
        kb_meta.roll_back_default(client, "team", None, "test", default_problem)
    assert len(client.source["defaults"]) == 2


def test_a_merged_structure_keeps_what_a_newer_kgqr_wrote_into_it() -> None:
    stored = kb_meta.DocumentStructure.model_validate(
        {"types": {"movie": ["title"]}, "relations": [], "aliases": {"film": "movie"}}
    )
    merged = stored.merge(kb_meta.DocumentStructure(types={"person": ["name"]}))
    assert merged.model_dump()["aliases"] == {"film": "movie"}
    assert set(merged.types) == {"movie", "person"}


def test_a_default_remembers_the_vectors_it_was_set_on_and_tells_once_they_change() -> None:
    """`tune auto` chose on the KB's vectors; after `kgqr ingest reembed` moved the KB to
    another model its default went on overriding `auto`'s choice for that model, unsaid."""
    client = Defaults([])
    chosen = kb_meta.set_default(client, "team", "base", {}, "nothing beat base", "test")
    assert chosen.embedder == "m" and chosen.other_vectors("m") is None
    told = chosen.other_vectors("embeddinggemma-300m")
    assert told is not None and "held m's vectors, and it holds embeddinggemma-300m's" in told
    older = kb_meta.KbDefault.model_validate(_default(1, "graph"))  # before kgqr kept it
    assert older.other_vectors("m") is None
