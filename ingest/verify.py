"""Does what OpenSearch holds agree with what Neo4j holds? Per-type document counts in
both stores, and nodes that relations point at but no document describes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from plugin import schema


@dataclass(frozen=True)
class VerifyReport:
    kb: str
    opensearch_counts: dict[str, int]
    neo4j_counts: dict[str, int]
    relation_counts: dict[str, int]
    entities: int
    triples_indexed: int
    dangling_nodes: list[str] = field(default_factory=list)

    @property
    def mismatches(self) -> dict[str, tuple[int, int]]:
        types = set(self.opensearch_counts) | set(self.neo4j_counts)
        return {
            name: (self.opensearch_counts.get(name, 0), self.neo4j_counts.get(name, 0))
            for name in sorted(types)
            if self.opensearch_counts.get(name, 0) != self.neo4j_counts.get(name, 0)
        }

    @property
    def empty(self) -> bool:
        """Nothing of the KB in either store: a name never ingested, or one fully dropped."""
        return not (
            self.opensearch_counts
            or self.neo4j_counts
            or self.relation_counts
            or self.entities
            or self.triples_indexed
            or self.dangling_nodes
        )

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.dangling_nodes


def verify(opensearch: Any, neo4j: Any, kb: str) -> VerifyReport:
    index = schema.documents_index(kb)
    opensearch_counts: dict[str, int] = {}
    if opensearch.indices.exists(index=index):
        opensearch.indices.refresh(index=index)
        body = {"size": 0, "aggs": {"types": {"terms": {"field": "type", "size": 10_000}}}}
        buckets = opensearch.search(index=index, body=body)["aggregations"]["types"]["buckets"]
        opensearch_counts = {b["key"]: b["doc_count"] for b in buckets}
    triples = schema.triples_index(kb)
    triples_indexed = 0
    if opensearch.indices.exists(index=triples):
        opensearch.indices.refresh(index=triples)
        triples_indexed = int(opensearch.count(index=triples)["count"])

    rows, _, _ = neo4j.execute_query(
        "MATCH (n:Node {kb: $kb}) RETURN n.type AS type, count(*) AS n", kb=kb
    )
    by_type = {row["type"]: row["n"] for row in rows}
    dangling, _, _ = neo4j.execute_query(
        "MATCH (n:Node {kb: $kb}) WHERE n.type IS NULL RETURN n.id AS id LIMIT 50", kb=kb
    )
    relations, _, _ = neo4j.execute_query(
        "MATCH (s:Node {kb: $kb})-[r]->() RETURN type(r) AS type, count(*) AS n", kb=kb
    )
    entities = int(by_type.pop("entity", 0))
    by_type.pop(None, None)
    return VerifyReport(
        kb=kb,
        opensearch_counts=opensearch_counts,
        neo4j_counts=by_type,
        relation_counts={row["type"]: row["n"] for row in relations},
        entities=entities,
        triples_indexed=triples_indexed,
        dangling_nodes=[row["id"] for row in dangling],
    )
