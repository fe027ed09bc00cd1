"""What sharing one graph copy per machine saves: N processes that each build their own
copy (the baseline, as every proxy worker did) against N processes that map the copy one
process wrote (query_rewriter/graph/shared_copies.py), in the same run.

Per process it reports the time to have a copy, the memory the copy adds (RSS, and PSS,
which splits shared pages between the processes that map them), and the p50 of one
expansion (`neighbours`, two hops, cap 50), so the ratio shows what mapping costs a search.
Each process reads every page of its copy before memory is measured: the steady state of a
proxy whose searches have touched the whole graph.

The graph is the synthetic one of bench/kg_stage_latency.py (papers citing papers, 5% of
citations from a few hubs), built in memory: the Neo4j read that precedes a build (17-28 s
at 1M relations) is measured there. `--kb NAME` reads a real knowledge base's graph from
Neo4j instead.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_common import save
from kgqr_core import connections
from kgqr_core.settings import get_settings
from query_rewriter.graph.copies import load_snapshot
from query_rewriter.graph.in_memory import GraphSnapshot
from query_rewriter.graph.shared_copies import SharedCopies

EPOCH, VERSION = "be0c4", 1


def synthetic(nodes: int, relations: int, hubs: int) -> GraphSnapshot:
    rng = random.Random(5)
    papers = [(str(i), "paper", f"paper {i}") for i in range(nodes)]
    cites = (
        (str(rng.randrange(hubs) if rng.random() < 0.05 else rng.randrange(nodes)),
         str(rng.randrange(nodes)), "cites")
        for _ in range(relations)
    )  # fmt: skip
    return GraphSnapshot.build(VERSION, papers, cites)


def from_neo4j(kb: str) -> GraphSnapshot:
    settings = get_settings()
    with connections.neo4j_driver(settings) as driver:
        snapshot = load_snapshot(driver, kb, VERSION, 50_000_000)
    if snapshot is None:
        raise SystemExit(f"{kb}'s graph is over 50M relations")
    return snapshot


def source(args: argparse.Namespace) -> GraphSnapshot:
    return from_neo4j(args.kb) if args.kb else synthetic(args.nodes, args.relations, args.hubs)


def memory_mb() -> dict[str, float]:
    """RSS, PSS and private (USS) memory of this process now, from smaps_rollup."""
    fields = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]:
        name, value, *_ = line.split()
        fields[name.rstrip(":")] = int(value) / 1024
    return {"rss": fields["Rss"], "pss": fields["Pss"],
            "uss": fields["Private_Clean"] + fields["Private_Dirty"]}  # fmt: skip


def never() -> GraphSnapshot:
    raise RuntimeError("the shared copy was not on disk")


def process(mode: str, args: argparse.Namespace, folder: str, held: Any, out: Any) -> None:
    before = memory_mb()
    started = time.perf_counter()
    if mode == "own":
        snapshot = source(args)
    else:
        mapped, _ = SharedCopies(Path(folder)).map_or_build("bench", EPOCH, VERSION, never)
        assert mapped is not None
        snapshot = mapped
    ready_s = time.perf_counter() - started
    for array in snapshot.arrays().values():
        int(np.asarray(array).view(np.uint8).sum())  # every page read once
    rng = random.Random(9)
    seeds = [snapshot.ids[rng.randrange(len(snapshot.ids))] for _ in range(args.queries)]
    timings = []
    for seed in seeds:
        begun = time.perf_counter()
        snapshot.neighbours([seed], 2, 50).document_ids()
        timings.append((time.perf_counter() - begun) * 1000)
    held.wait()  # every process holds its copy: shared pages are split between them
    after = memory_mb()
    out.put({
        "mode": mode, "ready_s": round(ready_s, 2),
        "expansion_p50_ms": round(statistics.median(timings), 3),
        **{f"{k}_mb": round(after[k] - before[k], 1) for k in after},
    })  # fmt: skip
    held.wait()


def run(mode: str, args: argparse.Namespace, folder: str) -> list[dict[str, Any]]:
    spawn = mp.get_context("spawn")
    held, out = spawn.Barrier(args.processes), spawn.Queue()
    workers = [
        spawn.Process(target=process, args=(mode, args, folder, held, out))
        for _ in range(args.processes)
    ]
    for worker in workers:
        worker.start()
    results = [out.get() for _ in workers]
    for worker in workers:
        worker.join()
    return results


def write_copy(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """The graph built (or read from Neo4j) and written as the shared copy, timed."""
    started = time.perf_counter()
    built = source(args)
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    SharedCopies(folder).map_or_build("bench", EPOCH, VERSION, lambda: built)
    write_s = time.perf_counter() - started
    size_mb = sum(f.stat().st_size for f in folder.rglob("*.npy")) / 2**20
    print(f"graph: {built.relationship_count:,} relations, {len(built.ids):,} nodes; "
          f"read {build_s:.1f} s, written in {write_s:.2f} s ({size_mb:.0f} MB)")  # fmt: skip
    return {
        "relations": built.relationship_count, "nodes": len(built.ids), "kb": args.kb,
        "processes": args.processes, "build_s": round(build_s, 2),
        "write_s": round(write_s, 2), "files_mb": round(size_mb, 1),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=2, help="proxy workers (default 2)")
    parser.add_argument("--nodes", type=int, default=50_000)
    parser.add_argument("--relations", type=int, default=1_000_000)
    parser.add_argument("--hubs", type=int, default=20)
    parser.add_argument("--queries", type=int, default=300, help="expansions timed per process")
    parser.add_argument("--kb", help="read this knowledge base's graph from Neo4j instead")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kgqr-shared-copy-") as folder:
        figures = write_copy(args, Path(folder))
        for mode in ("own", "mapped"):
            measured = run(mode, args, folder)
            figures[mode] = measured
            for row in measured:
                print(f"{mode:>6}: ready {row['ready_s']:6.2f} s, +{row['rss_mb']:6.1f} MB RSS, "
                      f"+{row['pss_mb']:6.1f} MB PSS, +{row['uss_mb']:6.1f} MB private, "
                      f"expansion p50 {row['expansion_p50_ms']:.3f} ms")  # fmt: skip
    own, mapped = figures["own"], figures["mapped"]

    def total(rows: list[dict[str, Any]], key: str) -> float:
        return sum(row[key] for row in rows)

    figures["pss_ratio"] = round(total(mapped, "pss_mb") / total(own, "pss_mb"), 3)
    figures["expansion_ratio"] = round(
        statistics.median(r["expansion_p50_ms"] for r in mapped)
        / statistics.median(r["expansion_p50_ms"] for r in own),
        3,
    )
    print(f"memory of {args.processes} processes' copies, mapped/own (PSS): "
          f"{figures['pss_ratio']:.2f}; expansion p50 mapped/own: "
          f"{figures['expansion_ratio']:.2f}")  # fmt: skip
    save("shared-graph-copy", figures)


if __name__ == "__main__":
    main()
