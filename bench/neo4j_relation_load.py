"""Typed-relation load rate into Neo4j through ingest.graph_writer on a synthetic graph.

Nodes are written first (as documents would be), then relations of five types in the
chunks an ingest job sends (``GRAPH_ONLY_PER_EMBEDDED`` times the default chunk size).
The load runs twice on a fresh graph each time: first through the plain UNWIND + MERGE
statement per relation type (the baseline, and what a Neo4j without kgqr's procedure
gets), then through ``kgqr.mergeRelations``, the path ingest takes on the Neo4j that
``kgqr services`` runs. Prints relations/s for both and their ratio; goal >= 50,000/s.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_common import save
from ingest import graph_writer
from ingest.chunking import DEFAULT_CHUNK_SIZE, GRAPH_ONLY_PER_EMBEDDED
from ingest.records import Document, Relation
from kgqr_core import connections
from kgqr_core.settings import get_settings
from plugin import installer
from plugin.neo4j import procedures

TYPES = ("cites", "authored_by", "has_topic", "published_in", "related_to")


def clear_graph(driver: Any, kb: str) -> None:
    """Delete a knowledge base's graph 5,000 nodes per transaction, so no transaction
    outgrows Neo4j's memory pool."""
    while True:
        records, _, _ = driver.execute_query(
            "MATCH (n:Node {kb: $kb}) WITH n LIMIT 5000 DETACH DELETE n RETURN count(*) AS n",
            kb=kb,
        )
        if records[0]["n"] == 0:
            return


def write_nodes(driver: Any, kb: str, nodes: int) -> None:
    for start in range(0, nodes, 20_000):
        graph_writer.write_documents(driver, kb, [
            Document(id=str(i), type="paper", title=f"paper {i}")
            for i in range(start, min(start + 20_000, nodes))
        ])  # fmt: skip


def load_relations(driver: Any, kb: str, args: argparse.Namespace, procedure: bool) -> float:
    """Relations/s for one load of ``args.relations`` random relations (same seed each time)."""
    rng = random.Random(7)
    written, started = 0, time.perf_counter()
    while written < args.relations:
        size = min(args.batch, args.relations - written)
        batch = [
            Relation(source=str(rng.randrange(args.nodes)), type=rng.choice(TYPES),
                     target=str(rng.randrange(args.nodes)))
            for _ in range(size)
        ]  # fmt: skip
        graph_writer.write_relations(driver, kb, batch, procedure=procedure)
        written += size
        if written % 200_000 < size or written == args.relations:
            rate = written / (time.perf_counter() - started)
            print(f"  {written:,} relations, {rate:,.0f}/s")
    return args.relations / (time.perf_counter() - started)


def main() -> None:
    settings = get_settings()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--relations", type=int, default=1_000_000)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=DEFAULT_CHUNK_SIZE * GRAPH_ONLY_PER_EMBEDDED,
                        help="relations per write call (an ingest chunk)")  # fmt: skip
    args = parser.parse_args()
    kb = f"bench-graph-{args.relations}"
    rates: dict[str, float] = {}
    with connections.neo4j_driver(settings) as driver:
        installer.install_neo4j(driver)
        if procedures.RELATION_MERGE not in procedures.installed(driver):
            sys.exit("this Neo4j has no kgqr.mergeRelations: start it with `kgqr services up`")
        for name, procedure in (("unwind", False), ("procedure", True)):
            clear_graph(driver, kb)
            started = time.perf_counter()
            write_nodes(driver, kb, args.nodes)
            print(f"nodes: {args.nodes:,} in {time.perf_counter() - started:.1f} s")
            print(f"relations through the {name} path, chunks of {args.batch:,}:")
            rates[name] = load_relations(driver, kb, args, procedure)
        clear_graph(driver, kb)
    for name, rate in rates.items():
        print(f"{name}: {rate:,.0f} relations/s (goal >= 50,000/s)")
    ratio = rates["procedure"] / rates["unwind"]
    print(f"procedure vs unwind: {ratio:.2f}x")
    save("neo4j_relation_load", {
        "relations": args.relations, "nodes": args.nodes, "batch": args.batch,
        "relations_per_s_baseline": rates["unwind"],
        "relations_per_s": rates["procedure"], "ratio": ratio,
    })  # fmt: skip


if __name__ == "__main__":
    main()
