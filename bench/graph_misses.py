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

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.bench_common import REPO, proxy_process, save
from kgqr_core import connections
from kgqr_core.settings import get_settings
from plugin import schema
from workbench.evaluation.query_sets import JudgedQuery, load_query_set

SETS = {"musique": "musique:{data}/musique100", "hotpotqa": "hotpotqa:{data}/hotpotqa100"}
TOP = 5
DEPTH = 20
ALL_BOOSTS = 100  # graph.boosts' ceiling (query_rewriter/strategies/graph/walk.py)
FARTHEST = 6  # hops a distance is looked for up to; farther counts as unlinked
SHORTEST = f"""
MATCH (a:Node {{kb: $kb, id: $source}}), (b:Node {{kb: $kb, id: $target}})
MATCH path = shortestPath((a)-[*..{FARTHEST}]-(b))
RETURN length(path) AS hops
"""


def hops_between(neo4j: Any, kb: str, source: str | None, target: str) -> int | None:
    """The fewest hops between two nodes in either direction, None past FARTHEST."""
    if source is None or source == target:
        return 0 if source == target else None
    found = neo4j.execute_query(SHORTEST, kb=kb, source=source, target=target).records
    return int(found[0]["hops"]) if found else None


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
    first = details.get("kept_first")
    relevant = {doc for doc, grade in query.judgments.items() if grade > 0}
    rows = []
    for doc in sorted(relevant):
        rank = graph.index(doc) + 1 if doc in graph else None
        if rank is not None and rank <= TOP:
            continue
        group = (
            "boosted, too little" if doc in boosted
            else "reached, cut" if doc in reached
            else "not reached"
        )  # fmt: skip
        rows.append({
            "query": query.id, "document": doc, "group": group,
            "rank_graph": rank, "rank_base": base.index(doc) + 1 if doc in base else None,
            "boost": boosted.get(doc), "first_hit_relevant": first in relevant,
            "hops_from_first_hit": hops_between(neo4j, kb, first, doc),
            "hops_from_relevant": min(
                (hops for other in relevant - {doc}
                 if (hops := hops_between(neo4j, kb, other, doc)) is not None),
                default=None,
            ),
        })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=sorted(SETS), required=True)
    parser.add_argument("--kb", required=True, help="The knowledge base of that set's corpus.")
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    args = parser.parse_args()
    queries = load_query_set(SETS[args.set].format(data=args.data), None, None)
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
    distances = {"hops_from_first_hit": "the first hit",
                 "hops_from_relevant": "the nearest other relevant document"}  # fmt: skip
    for field, label in distances.items():
        hops = Counter(row[field] for row in rows if row["group"] == "not reached")
        spread = ", ".join(
            f"{'unlinked' if h is None else h}: {hops[h]}"
            for h in sorted(hops, key=lambda h: FARTHEST + 1 if h is None else h)
        )
        print(f"  not reached, hops from {label} (up to {FARTHEST}): {spread}")
    save(f"graph-misses-{args.kb}", {"set": args.set, "kb": args.kb, "relevant": relevant,
                                     "groups": dict(groups), "misses": rows})  # fmt: skip


if __name__ == "__main__":
    main()
