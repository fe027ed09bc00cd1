"""BM25's share of the hybrid query (`hybrid.bm25`), swept per knowledge base, each point
on both halves of the dev set: a stronger embedder wants a smaller BM25 share, and a
share is kept only where it wins on both halves.

    python -m bench.hybrid_weight_sweep \\
        --dataset hotpotqa=hotpotqa:../shared/data/hotpotqa100 \\
        --dataset hotpotqa-gemma=hotpotqa:../shared/data/hotpotqa100 \\
        [--weights 0,0.1,0.2,0.3,0.5] [--strategies base,graph]

Each point is one `kgqr eval run` through one proxy started here (rewrite cache off);
reports go to bench/results/hybrid-weights-DATE/, the table to the terminal and a JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.bench_common import RESULTS, proxy_process, save, wait_for_graph_copy
from bench.dev_halves import halves


def run_point(proxy: str, kb: str, spec: str, strategies: str, weight: str, out: Path) -> Path:
    params = [] if weight == "default" else ["--param", f"hybrid.bm25={weight}"]
    command = [sys.executable, "-c", "from kgqr_ops.cli import main; main()", "eval", "run",
               spec, "--kb", kb, "--strategies", strategies, "--proxy", proxy,
               "--out", str(out), *params]  # fmt: skip
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return out.with_suffix(".json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", action="append", required=True, metavar="KB=QUERY_SET")
    parser.add_argument("--weights", default="default,0,0.1,0.2,0.3,0.5")
    parser.add_argument("--strategies", default="base")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KGQR_X=VALUE",
        help="a setting for the proxy of this run (e.g. KGQR_GRAPH_SNAPSHOT_MAX_RELATIONS=0: "
        "`graph` expands in Neo4j)",
    )
    args = parser.parse_args()
    env = dict(item.split("=", 1) for item in args.env)
    folder = RESULTS / f"hybrid-weights-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}"
    folder.mkdir(parents=True)
    points: list[dict[str, Any]] = []
    with proxy_process({"KGQR_REWRITE_CACHE_TTL_S": "0", **env}) as proxy:
        for dataset in args.dataset:
            kb, spec = dataset.split("=", 1)
            copies = env.get("KGQR_GRAPH_SNAPSHOT_MAX_RELATIONS") != "0"
            if copies and "graph" in args.strategies.split(","):
                print(f"{kb}: graph read from {wait_for_graph_copy(proxy.url, kb, 60)}")
            for weight in args.weights.split(","):
                report = run_point(proxy.url, kb, spec, args.strategies, weight,
                                   folder / f"{kb}-bm25-{weight.replace('.', '_')}")  # fmt: skip
                for part, strategies in halves(json.loads(report.read_text())).items():
                    for strategy, metrics in strategies.items():
                        points.append({"kb": kb, "bm25": weight, "strategy": strategy,
                                       "part": part, **metrics})  # fmt: skip
                        figures = "  ".join(f"{k} {v:5.1f}" for k, v in metrics.items())
                        print(f"{kb:<16} bm25 {weight:<8} {strategy:<8} {part:<12} {figures}",
                              flush=True)  # fmt: skip
    save("hybrid-weights", {"folder": folder.name, "env": env, "points": points})


if __name__ == "__main__":
    main()
