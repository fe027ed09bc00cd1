"""Neo4j reads for the KG strategies: h-hop neighbourhoods in one round trip, hubs capped.

Every expansion step takes at most ``cap`` relationships, so a node of degree 10,000
costs the same as one of degree ``cap``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

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
  RETURN collect(CASE WHEN n2 IS NULL THEN null ELSE [
    n2.id, n2.name, n2.type, coalesce(r2.relation, toLower(type(r2))), startNode(r2) = n1
  ] END) AS second
}
RETURN collect([seed, coalesce(r1.relation, toLower(type(r1))), startNode(r1) = s,
                n1.id, n1.name, n1.type, second]) AS rows
"""


def _render_hop(relation: str, outgoing: bool) -> str:
    return relation if outgoing else f"inverse of {relation}"


class Neighbour(NamedTuple):
    """A node reached from a seed, with the path that reached it. A plain named tuple with
    the path kept raw: a hub-capped 2-hop query yields thousands of these, only the few DRF
    keeps are ever rendered, and building richer objects was most of the stage's time."""

    seed: str
    id: str
    name: str
    type: str | None
    # (relation, outgoing) for one hop; (relation, outgoing, via name, relation, outgoing) for two
    path: tuple[Any, ...]

    @property
    def has_document(self) -> bool:
        return self.type not in (None, "entity")

    @property
    def hops(self) -> int:
        return 1 if len(self.path) == 2 else 2

    def relation_text(self) -> str:
        first = _render_hop(self.path[0], self.path[1])
        if len(self.path) == 2:
            return first
        return f"{first} -> [{self.path[2]}] -> {_render_hop(self.path[3], self.path[4])}"


async def neighbours(
    driver: Any, kb: str, node_ids: list[str], hops: int = 2, cap: int = 50
) -> list[Neighbour]:
    """Distinct (seed, neighbour) pairs within `hops` of the seeds, shortest path first."""
    records, _, _ = await driver.execute_query(
        NEIGHBOURS, kb=kb, seeds=node_ids, hops=hops, cap=cap, routing_="r"
    )
    found: dict[tuple[str, str], Neighbour] = {}
    seeds = set(node_ids)
    rows = records[0]["rows"]
    for seed, relation, outgoing, node_id, name, node_type, _ in rows:
        if node_id not in seeds and (seed, node_id) not in found:
            found[seed, node_id] = Neighbour(
                seed, node_id, name or node_id, node_type, (relation, outgoing)
            )
    # Second hops only after every first hop, so a node one hop away keeps its short path.
    for seed, relation, outgoing, node_id, name, _, second in rows:
        via = name or node_id
        for next_id, next_name, next_type, next_relation, next_outgoing in second:
            key = (seed, next_id)
            if next_id in seeds or key in found:
                continue
            found[key] = Neighbour(
                seed,
                next_id,
                next_name or next_id,
                next_type,
                (relation, outgoing, via, next_relation, next_outgoing),
            )
    return list(found.values())


ENTITY_EDGES = """
UNWIND $frontier AS source
MATCH (e:Node {kb: $kb, id: source})
CALL (e) {
  MATCH (e)-[r:RELATION]-(n:Node)
  RETURN r.triple_id AS triple_id, n.id AS target LIMIT $cap
}
RETURN collect([source, triple_id, target]) AS edges
"""


async def entity_edges(
    driver: Any, kb: str, frontier: list[str], cap: int = 50
) -> list[tuple[str, str, str]]:
    """(source entity, triple id, other entity) for RELATION edges of the frontier, capped
    per node; one round trip for the whole frontier."""
    records, _, _ = await driver.execute_query(
        ENTITY_EDGES, kb=kb, frontier=frontier, cap=cap, routing_="r"
    )
    return [(source, triple_id, target) for source, triple_id, target in records[0]["edges"]]
