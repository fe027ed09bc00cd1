"""A whole knowledge base in memory (documents with their fields, typed edges), read from
the stores with kgqr's account: what `kgqr queries synthesize` computes exact answers on.
An offline tool of the KB's owner, never a search path (searches read as the caller)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from plugin.schema import documents_index, relation_names


@dataclass(frozen=True)
class SnapshotDocument:
    id: str
    type: str
    title: str
    text: str
    fields: dict[str, Any]


@dataclass
class KbSnapshot:
    documents: dict[str, SnapshotDocument]
    # (source, relation name as the structure spells it, target)
    edges: list[tuple[str, str, str]]
    _out: dict[tuple[str, str], set[str]] = field(default_factory=dict, repr=False)
    _in: dict[tuple[str, str], set[str]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        out: dict[tuple[str, str], set[str]] = defaultdict(set)
        into: dict[tuple[str, str], set[str]] = defaultdict(set)
        for source, relation, target in self.edges:
            out[source, relation].add(target)
            into[target, relation].add(source)
        self._out, self._in = dict(out), dict(into)

    def targets(self, source: str, relation: str) -> set[str]:
        return self._out.get((source, relation), set())

    def sources(self, target: str, relation: str) -> set[str]:
        return self._in.get((target, relation), set())

    def of_type(self, node_type: str) -> list[SnapshotDocument]:
        return [doc for doc in self.documents.values() if doc.type == node_type]

    def edge_types(self) -> dict[tuple[str, str, str], int]:
        """(source type, relation, target type) -> how many edges, for documents on both ends."""
        counts: dict[tuple[str, str, str], int] = defaultdict(int)
        for source, relation, target in self.edges:
            if source in self.documents and target in self.documents:
                counts[self.documents[source].type, relation, self.documents[target].type] += 1
        return dict(counts)


def load_snapshot(opensearch: Any, neo4j: Any, kb: str, relations: list[str]) -> KbSnapshot:
    """Every document of `kb` and every edge between its nodes; `relations` are the
    structure's relation names (Neo4j keeps them as relationship types)."""
    from opensearchpy import helpers

    documents = {}
    hits: Iterator[dict[str, Any]] = helpers.scan(
        opensearch,
        index=documents_index(kb),
        query={"query": {"match_all": {}}, "_source": ["type", "title", "body", "fields"]},
        size=2_000,
    )
    for hit in hits:
        source = hit["_source"]
        documents[hit["_id"]] = SnapshotDocument(
            hit["_id"],
            source.get("type", ""),
            source.get("title", ""),
            source.get("body", ""),
            source.get("fields") or {},
        )
    named = relation_names(relations)
    records, _, _ = neo4j.execute_query(
        "MATCH (s:Node {kb: $kb})-[r]->(t:Node {kb: $kb}) RETURN s.id, type(r), t.id", kb=kb
    )
    edges = [(s, named[r], t) for s, r, t in records if r in named]
    return KbSnapshot(documents, edges)


def relation_signatures(
    neo4j: Any, kb: str, relations: list[str]
) -> list[tuple[str, str, str, int]]:
    """(source type, relation, target type, edges) for every relation the KB really has:
    what a plan's `follow` steps can take, and in which direction."""
    named = relation_names(relations)
    records, _, _ = neo4j.execute_query(
        "MATCH (s:Node {kb: $kb})-[r]->(t:Node {kb: $kb}) "
        "RETURN s.type AS s, type(r) AS r, t.type AS t, count(*) AS n ORDER BY n DESC",
        kb=kb,
    )
    return [(rec["s"], named[rec["r"]], rec["t"], rec["n"]) for rec in records if rec["r"] in named]
