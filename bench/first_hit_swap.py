"""What ranking a strategy's second hit above its first would cost at the top.

The search-speed issue's two-hop test asks `graph` to rank a passage reached over a
two-hop path first, above the plain query's first hit, while its quality goal asks for
MRR within a point of base's. Both graph strategies keep the plain first hit first. This
measures the mildest alternative on a published `kgqr eval` report, with no new run: the
strategy's hits 1 and 2 swapped (for `graph`, its best graph link first and the plain
first hit second, which the fusion test's "never below rank 2" would allow). Prints Hit@1
and MRR per half of the query set, as ranked and swapped.

    PYTHONPATH=. python -m bench.first_hit_swap \
        bench/results/graph-bridge/eval-musique-dev50-base-graph.json \
        musique:../shared/data/musique100 --strategy graph
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from workbench.evaluation.metrics import hit_at, reciprocal_rank
from workbench.evaluation.query_sets import load_query_set

Reorder = Callable[[list[str]], list[str]]


def _swapped(ranked: list[str]) -> list[str]:
    return [*ranked[1:2], *ranked[:1], *ranked[2:]]


def _as_ranked(ranked: list[str]) -> list[str]:
    return ranked


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="a `kgqr eval` JSON report")
    parser.add_argument("queries", help="its query set, KIND:PATH as `kgqr eval` takes it")
    parser.add_argument("--strategy", default="graph")
    args = parser.parse_args(argv)
    judged = {query.id: query.judgments for query in load_query_set(args.queries)}
    rows = [q for q in json.loads(args.report.read_text())["queries"]
            if q["strategy"] == args.strategy]  # fmt: skip
    if not rows:
        raise SystemExit(f"{args.report}: no queries of strategy {args.strategy!r}")
    middle = len(rows) // 2
    halves = {"first half": rows[:middle], "second half": rows[middle:]}
    orders: dict[str, Reorder] = {"as ranked": _as_ranked, "hits 1 and 2 swapped": _swapped}
    print(f"{args.report.name}, {args.strategy}, {len(rows)} queries")
    for name, reorder in orders.items():
        figures = []
        for half, part in halves.items():
            ranked = [(reorder(list(row["ranked"])), judged[row["query_id"]]) for row in part]
            hit1 = 100 * sum(hit_at(r, j, 1) for r, j in ranked) / len(ranked)
            mrr = 100 * sum(reciprocal_rank(r, j) for r, j in ranked) / len(ranked)
            figures.append(f"{half}: Hit@1 {hit1:.1f}, MRR {mrr:.1f}")
        print(f"  {name:<22} " + "; ".join(figures))


if __name__ == "__main__":
    main()
