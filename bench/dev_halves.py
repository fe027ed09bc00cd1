"""Metrics of `kgqr eval` reports on each half of their query set, and on the whole.

Figures are re-measured on questions never seen, and a setting tuned on one dev set fools
itself; a setting is kept only if it wins on both halves. This prints, per report and
strategy (each draw of an LLM's answers apart, as `kgqr eval --samples` labels them),
R@2 / R@5 / R@10 / MRR on questions 1-25, 26-50 (generally: the first and the
second half in the report's order) and all.

    python -m bench.dev_halves bench/results/eval-hotpotqa100-dev50-graph.json ...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from workbench.evaluation.runner import sample_label

METRICS = ("R@2", "R@5", "R@10", "MRR")


def halves(report: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """half name -> strategy (and draw of the LLM's answers) -> metric -> percent."""
    queries = [
        {**query, "strategy": sample_label(query["strategy"], query.get("sample", 0))}
        for query in report["queries"]
    ]
    order = list(dict.fromkeys(query["query_id"] for query in queries))
    middle = len(order) // 2
    parts = {"first half": set(order[:middle]), "second half": set(order[middle:]),
             "all": set(order)}  # fmt: skip
    table: dict[str, dict[str, dict[str, float]]] = {}
    for part, ids in parts.items():
        for strategy in dict.fromkeys(query["strategy"] for query in queries):
            rows = [q for q in queries if q["strategy"] == strategy and q["query_id"] in ids]
            table.setdefault(part, {})[strategy] = {
                metric: 100 * sum(row["scores"][metric] for row in rows) / len(rows)
                for metric in METRICS
            }
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path, help="OUT.json files of kgqr eval")
    args = parser.parse_args()
    for path in args.reports:
        print(path.name)
        for part, strategies in halves(json.loads(path.read_text())).items():
            for strategy, metrics in strategies.items():
                figures = "  ".join(f"{name} {value:5.1f}" for name, value in metrics.items())
                print(f"  {part:<12} {strategy:<12} {figures}")


if __name__ == "__main__":
    main()
