"""Neo4j reads for the KG strategies: h-hop neighbourhoods in one round trip, hubs capped.

Every expansion step takes at most ``cap`` relationships, so a node of degree 10,000
costs the same as one of degree ``cap``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NEIGHBOURS = """
UNWIND $seeds AS seed
MATCH (s:Node {kb: $kb, id: seed})
CALL (s) {
  MATCH (s)-[r1]-(n1:Node)
  RETURN r1, n1 LIMIT $cap
}
CALL (s, n1) {
  OPTIONAL MATCH (n1)-[r2]-(n2:Node)
  WHERE $hops >= 2 AND n2 <> s
  WITH r2, n2 LIMIT $cap
  RETURN collect(CASE WHEN n2 IS NULL THEN null ELSE {
    relation: coalesce(r2.relation, toLower(type(r2))), outgoing: startNode(r2) = n1,
    id: n2.id, name: n2.name, type: n2.type} END) AS second
}
RETURN seed, coalesce(r1.relation, toLower(type(r1))) AS relation, startNode(r1) = s AS outgoing,
       n1.id AS id, n1.name AS name, n1.type AS type, second
"""


@dataclass(frozen=True)
class Hop:
    relation: str
    outgoing: bool

    def render(self) -> str:
        return self.relation if self.outgoing else f"inverse of {self.relation}"


@dataclass(frozen=True)
class Neighbour:
    """A node reached from a seed, with the path that reached it."""

    seed: str
    id: str
    name: str
    type: str | None
    path: tuple[Hop | str, ...]  # hops, with the names of intermediate nodes between them

    @property
    def has_document(self) -> bool:
        return self.type not in (None, "entity")

    def relation_text(self) -> str:
        return " -> ".join(p.render() if isinstance(p, Hop) else f"[{p}]" for p in self.path)


async def neighbours(
    driver: Any, kb: str, node_ids: list[str], hops: int = 2, cap: int = 50
) -> list[Neighbour]:
    """Distinct (seed, neighbour) pairs within `hops` of the seeds, shortest path first."""
    records, _, _ = await driver.execute_query(
        NEIGHBOURS, kb=kb, seeds=node_ids, hops=hops, cap=cap, routing_="r"
    )
    found: dict[tuple[str, str], Neighbour] = {}
    seeds = set(node_ids)
    for row in records:
        first = Hop(row["relation"], row["outgoing"])
        if row["id"] not in seeds:
            key = (row["seed"], row["id"])
            found.setdefault(
                key,
                Neighbour(row["seed"], row["id"], row["name"] or row["id"], row["type"], (first,)),
            )
        for nxt in row["second"]:
            key = (row["seed"], nxt["id"])
            if nxt["id"] in seeds or key in found:
                continue
            path = (first, row["name"] or row["id"], Hop(nxt["relation"], nxt["outgoing"]))
            found[key] = Neighbour(
                row["seed"], nxt["id"], nxt["name"] or nxt["id"], nxt["type"], path
            )
    return list(found.values())


ENTITY_EDGES = """
UNWIND $frontier AS source
MATCH (e:Node {kb: $kb, id: source})
CALL (e) {
  MATCH (e)-[r:RELATION]-(n:Node)
  RETURN r.triple_id AS triple_id, n.id AS target LIMIT $cap
}
RETURN source, triple_id, target
"""


async def entity_edges(
    driver: Any, kb: str, frontier: list[str], cap: int = 50
) -> list[tuple[str, str, str]]:
    """(source entity, triple id, other entity) for RELATION edges of the frontier, capped
    per node; one round trip for the whole frontier."""
    records, _, _ = await driver.execute_query(
        ENTITY_EDGES, kb=kb, frontier=frontier, cap=cap, routing_="r"
    )
    return [(row["source"], row["triple_id"], row["target"]) for row in records]
