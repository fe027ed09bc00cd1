"""Do the LLM-free graph strategies rank the same, question by question, whichever store
their graph is read from: Neo4j, the copy in OpenSearch (kgqr-KB-graph), or the proxy's
in-memory copy?

Runs `kgqr eval run` on the shared dev sets once per source (the rewrite cache is off in
eval) and compares each query's ranking. Neo4j and the OpenSearch copy should agree
everywhere: the copy keeps each node's edges in Neo4j's expansion order. The in-memory
copy orders a hub's edges its own way, so where a hub cap binds it may keep other edges.

    python -m bench.graph_source_parity [--sets musique,hotpotqa] [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_common import save

STRATEGIES = "graph,graph_walk,graph_mix"
SOURCES: dict[str, dict[str, str]] = {
    "neo4j": {"KGQR_GRAPH_SNAPSHOT_MAX_RELATIONS": "0", "KGQR_GRAPH_PROJECTION_READS": "false"},
    "opensearch": {"KGQR_GRAPH_SNAPSHOT_MAX_RELATIONS": "0"},
    "snapshot": {},  # preloaded per set below
}
METRICS = ("R@5", "MRR", "nDCG@10", "mAP", "R@10")


def evaluate(kind: str, data: Path, source: str, out: Path) -> dict[str, Any]:
    env = {**os.environ, **SOURCES[source]}
    if source == "snapshot":
        env["KGQR_GRAPH_SNAPSHOT_PRELOAD"] = kind
    run = subprocess.run(
        ["kgqr", "eval", "run", f"{kind}:{data / f'{kind}100'}", "--kb", kind,
         "--strategies", STRATEGIES, "--out", str(out)],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    if run.returncode != 0:
        raise SystemExit(f"kgqr eval run failed ({source}):\n{run.stderr[-3000:]}")
    return dict(json.loads(out.with_suffix(".json").read_text()))


def rankings(result: dict[str, Any]) -> dict[tuple[str, str], list[str]]:
    return {(q["strategy"], q["query_id"]): q["ranked"] for q in result["queries"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sets", default="musique,hotpotqa")
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    args = parser.parse_args()
    figures: dict[str, Any] = {"strategies": STRATEGIES}
    with tempfile.TemporaryDirectory() as scratch:
        for kind in args.sets.split(","):
            results = {
                source: evaluate(kind, args.data, source, Path(scratch) / f"{kind}-{source}")
                for source in SOURCES
            }
            ranked = {source: rankings(result) for source, result in results.items()}
            neo4j = ranked["neo4j"]
            compared: dict[str, Any] = {"rankings": len(neo4j)}
            for source in ("opensearch", "snapshot"):
                differ = sorted(
                    f"{s} {q}" for (s, q), ids in neo4j.items() if ranked[source][s, q] != ids
                )
                compared[f"{source}_differs"] = len(differ)
                compared[f"{source}_differs_in"] = differ
            compared["metrics"] = {
                source: {
                    row["strategy"]: {metric: 100 * row["metrics"][metric] for metric in METRICS}
                    for row in result["strategies"]
                }
                for source, result in results.items()
            }
            figures[kind] = compared
            print(
                f"{kind}: of {len(neo4j)} rankings, the OpenSearch copy's differ from Neo4j's in "
                f"{compared['opensearch_differs']}, the in-memory copy's in "
                f"{compared['snapshot_differs']}"
            )
            for source, rows in compared["metrics"].items():
                print(f"  {source:10} " + "; ".join(
                    f"{name} " + " ".join(f"{m} {v:.1f}" for m, v in row.items())
                    for name, row in rows.items()
                ))  # fmt: skip
    save("graph_source_parity", figures)


if __name__ == "__main__":
    main()
