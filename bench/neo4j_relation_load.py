"""Typed-relation load rate into Neo4j through ingest.graph_writer on a synthetic graph.

Nodes are written first (as documents would be), then relations of five types in the
batches a chunk task sends. Prints relations/s; goal >= 50,000/s.
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
from ingest.records import Document, Relation
from plugin import connections, installer
from plugin.settings import get_settings

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--relations", type=int, default=1_000_000)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=20_000, help="relations per write call")
    parser.add_argument("--keep", action="store_true", help="keep the graph (for other benches)")
    args = parser.parse_args()
    settings = get_settings()
    kb = f"bench-graph-{args.relations}"
    rng = random.Random(7)
    with connections.neo4j_driver(settings) as driver:
        installer.install_neo4j(driver)
        clear_graph(driver, kb)
        started = time.perf_counter()
        for start in range(0, args.nodes, 20_000):
            graph_writer.write_documents(driver, kb, [
                Document(id=str(i), type="paper", title=f"paper {i}")
                for i in range(start, min(start + 20_000, args.nodes))
            ])  # fmt: skip
        node_s = time.perf_counter() - started
        print(f"nodes: {args.nodes} in {node_s:.1f} s ({args.nodes / node_s:,.0f}/s)")

        written, started = 0, time.perf_counter()
        while written < args.relations:
            size = min(args.batch, args.relations - written)
            batch = [
                Relation(source=str(rng.randrange(args.nodes)), type=rng.choice(TYPES),
                         target=str(rng.randrange(args.nodes)))
                for _ in range(size)
            ]  # fmt: skip
            graph_writer.write_relations(driver, kb, batch)
            written += size
            if written % 200_000 == 0 or written == args.relations:
                rate = written / (time.perf_counter() - started)
                print(f"  {written:,} relations, {rate:,.0f}/s")
        elapsed = time.perf_counter() - started
        if not args.keep:
            clear_graph(driver, kb)
    rate = args.relations / elapsed
    print(f"relations: {args.relations:,} in {elapsed:.1f} s = {rate:,.0f}/s (goal >= 50,000/s)")
    save("neo4j_relation_load", {"relations": args.relations, "nodes": args.nodes,
                                 "batch": args.batch, "relations_per_s": rate})  # fmt: skip


if __name__ == "__main__":
    main()
