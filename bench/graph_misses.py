"""Where `graph` misses: each relevant document outside its top 5, and why.

For every judged question, base and `graph` are searched through a kgqr proxy with the
explain on, and `graph` again with graph.boosts at its ceiling (100), which shows every
document the bridge reaches from the first hit (up to 100). Each relevant document that
`graph` leaves outside its top 5 falls in one of these groups:
- boosted, too little: the bridge reached and boosted it, and it still ranks below 5;
- reached, cut: the bridge reaches it, but below the graph.boosts most similar;
- not reached: not among the (up to 100) documents the bridge boosts at the ceiling: not
  within two hops of the first hit, or behind a hub the hub cap (`kar_hub_cap`) cuts;
and, across the groups, whether the first hit itself was relevant, and which relevant
documents base had in its top 5 that `graph` pushed out. For each miss it also reads from
Neo4j how many hops lie between it and the first hit, and between it and the nearest other
relevant document of its question (a passage and a passage naming the same entity are two
hops apart): a miss far from every relevant document is one no walk from the right first
hit reaches either; only links the graph lacks would.

It says where a better graph signal would have to come from, not how good one is:
its figures are counts, not compared settings.

    python -m bench.graph_misses --set musique --kb musique-gemma
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import httpx

from bench.bench_common import dev_queries, dev_set_parser, proxy_process, save
from kgqr_core import connections
from kgqr_core.settings import get_settings
from plugin import schema
from workbench.evaluation.query_sets import JudgedQuery

TOP = 5
DEPTH = 20
ALL_BOOSTS = 100  # graph.boosts' ceiling (query_rewriter/strategies/graph/walk.py)
FARTHEST = 6  # hops a distance is looked for up to
FAR = f"none within {FARTHEST}"
ABSENT = "not in the graph"
NO_OTHER = "no other relevant document"
SHORTEST = f"""
MATCH (a:Node {{kb: $kb, id: $source}}), (b:Node {{kb: $kb, id: $target}})
OPTIONAL MATCH path = shortestPath((a)-[*..{FARTHEST}]-(b))
RETURN length(path) AS hops
"""


def hops_between(neo4j: Any, kb: str, source: str, target: str) -> int | str:
    """The fewest hops between two documents in either direction, or why none is counted:
    FAR past FARTHEST, ABSENT when either is not a node of the graph."""
    if source == target:  # shortestPath refuses a path from a node to itself
        return 0
    found = neo4j.execute_query(SHORTEST, kb=kb, source=source, target=target).records
    if not found:
        return ABSENT
    return FAR if found[0]["hops"] is None else int(found[0]["hops"])


def nearest(neo4j: Any, kb: str, document: str, others: list[str]) -> tuple[str | None, int | str]:
    """Of `others` (best first), the one fewest hops from `document` (of equals, the
    first), and how many; else why none is counted (FAR over ABSENT: one of them is in the
    graph, only too far)."""
    distances = {other: hops_between(neo4j, kb, other, document) for other in others}
    counted = {other: hops for other, hops in distances.items() if isinstance(hops, int)}
    if counted:
        best = min(counted, key=lambda other: counted[other])
        return best, counted[best]
    if not distances:
        return None, NO_OTHER
    return None, FAR if FAR in distances.values() else ABSENT


def rank_in(ranking: list[str], doc: str | None) -> int | None:
    """The 1-based rank of `doc` in a page of ids, None when it is not on the page."""
    return ranking.index(doc) + 1 if doc in ranking else None


def spread(values: list[int | str]) -> str:
    """'2: 10, 4: 4, none within 6: 1': counts first, reasons after."""
    counts = Counter(values)
    order = sorted(counts, key=lambda v: (isinstance(v, str), v if isinstance(v, int) else 0))
    return ", ".join(f"{value}: {counts[value]}" for value in order)


def explained(
    client: httpx.Client, url: str, kb: str, query: JudgedQuery, strategy: str,
    params: dict[str, float] | None = None,
) -> tuple[list[str], dict[str, Any]]:  # fmt: skip
    """The ranked ids and the explain's details of one search."""
    body: dict[str, Any] = {"query": {"match": {"text": query.text}}, "size": DEPTH,
                            "_source": False}  # fmt: skip
    if params:
        body["ext"] = {"kgqr": {"params": params}}
    answer = client.post(
        f"{url}/{schema.documents_index(kb)}/_search",
        params={"kgqr.strategy": strategy, "kgqr.explain": "true"},
        json=body,
    )
    answer.raise_for_status()
    found = answer.json()
    # A search that fell back is the plain query's: its misses would all read "not reached".
    if fallback := found["kgqr"].get("fallback"):
        raise RuntimeError(f"{strategy} fell back on {query.id!r}: {fallback}")
    return [hit["_id"] for hit in found["hits"]["hits"]], found["kgqr"].get("details") or {}


def misses_of(
    client: httpx.Client, url: str, neo4j: Any, kb: str, query: JudgedQuery
) -> list[dict[str, Any]]:
    base, _ = explained(client, url, kb, query, "base")
    graph, details = explained(client, url, kb, query, "graph")
    _, reach = explained(client, url, kb, query, "graph", {"graph.boosts": ALL_BOOSTS})
    boosted = {node["id"]: node["score"] for node in details.get("graph_nodes", [])}
    reached = {node["id"] for node in reach.get("graph_nodes", [])}
    first: str = details["kept_first"]
    relevant = {doc for doc, grade in query.judgments.items() if grade > 0}
    rows = []
    for doc in sorted(relevant):
        rank = rank_in(graph, doc)
        if rank is not None and rank <= TOP:
            continue
        group = (
            "boosted, too little" if doc in boosted
            else "reached, cut" if doc in reached
            else "not reached"
        )  # fmt: skip
        # The other relevant documents in graph's order: of two as near, the higher ranked.
        others = sorted(relevant - {doc}, key=lambda o: (rank_in(graph, o) or DEPTH + 1, o))
        other, hops = nearest(neo4j, kb, doc, others)
        rows.append({
            "query": query.id, "document": doc, "group": group,
            "rank_graph": rank, "rank_base": rank_in(base, doc),
            "boost": boosted.get(doc), "first_hit_relevant": first in relevant,
            "hops_from_first_hit": hops_between(neo4j, kb, first, doc),
            "nearest_relevant": other, "hops_from_relevant": hops,
            "nearest_relevant_rank_graph": rank_in(graph, other),
        })  # fmt: skip
    return rows


def main() -> None:
    args = dev_set_parser(__doc__.split("\n\n")[0]).parse_args()
    queries = dev_queries(args.set, args.data)
    rows: list[dict[str, Any]] = []
    with (
        proxy_process({"KGQR_REWRITE_CACHE_TTL_S": "0"}) as proxy,
        httpx.Client(timeout=120) as client,
        connections.neo4j_driver(get_settings()) as neo4j,
    ):
        for query in queries:
            rows.extend(misses_of(client, proxy.url, neo4j, args.kb, query))
    relevant = sum(1 for q in queries for grade in q.judgments.values() if grade > 0)
    groups = Counter(row["group"] for row in rows)
    first_relevant = Counter(row["group"] for row in rows if row["first_hit_relevant"])
    pushed_out = [row for row in rows if row["rank_base"] is not None and row["rank_base"] <= TOP]
    print(f"{args.kb}: {relevant} relevant documents in {len(queries)} questions, "
          f"{len(rows)} outside graph's top {TOP}")  # fmt: skip
    for group in ("boosted, too little", "reached, cut", "not reached"):
        print(f"  {group:<20} {groups[group]:>3} ({first_relevant[group]} with a relevant "
              "first hit)")  # fmt: skip
    print(f"  in base's top {TOP}, pushed out by graph: {len(pushed_out)}")
    unreached = [row for row in rows if row["group"] == "not reached"]
    print(f"  not reached, hops from the first hit: "
          f"{spread([row['hops_from_first_hit'] for row in unreached])}")  # fmt: skip
    print(f"  not reached, hops from the nearest other relevant document: "
          f"{spread([row['hops_from_relevant'] for row in unreached])}")  # fmt: skip
    # Where a second bridge, from graph's own top hits, would start next to the miss.
    chained = [
        row for row in unreached
        if row["hops_from_relevant"] == 2
        and row["nearest_relevant_rank_graph"] is not None
        and row["nearest_relevant_rank_graph"] <= 3
    ]  # fmt: skip
    print(f"  not reached, two hops from a relevant document graph ranks in its top 3: "
          f"{len(chained)}")  # fmt: skip
    save(f"graph-misses-{args.kb}", {"set": args.set, "kb": args.kb, "relevant": relevant,
                                     "groups": dict(groups), "misses": rows})  # fmt: skip


if __name__ == "__main__":
    main()
