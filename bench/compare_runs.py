"""Two `kgqr eval` reports of the same questions, compared question by question: how many
(strategy, question) pairs ranked the same documents in the same order and scored the same,
and each strategy's metrics side by side. Exits 1 when a ranking differs, so a refactoring
that must not change behaviour can be checked with it.

    python -m bench.compare_runs BEFORE.json AFTER.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _pairs(report: dict[str, Any]) -> dict[tuple[str, str, int], dict[str, Any]]:
    return {(q["strategy"], q["query_id"], q.get("sample", 0)): q for q in report["queries"]}


def compare(before: dict[str, Any], after: dict[str, Any]) -> tuple[list[str], int]:
    """Lines to print, and how many pairs differ (missing on either side counts)."""
    old, new = _pairs(before), _pairs(after)
    shared = old.keys() & new.keys()
    ranked = sum(old[k]["ranked"] == new[k]["ranked"] for k in shared)
    scored = sum(old[k]["scores"] == new[k]["scores"] for k in shared)
    differing = len(old.keys() ^ new.keys()) + len(shared) - ranked
    lines = [
        f"{len(shared)} (strategy, question) pairs in both; "
        f"{len(old.keys() ^ new.keys())} in one only",
        f"same ranking {ranked}/{len(shared)}, same scores {scored}/{len(shared)}",
    ]
    metrics_after = {row["strategy"]: row["metrics"] for row in after["strategies"]}
    for row in before["strategies"]:
        then, now = row["metrics"], metrics_after.get(row["strategy"], {})
        shown = ", ".join(
            f"{name} {100 * value:.1f}" + ("" if now.get(name) == value else
                                            f" -> {100 * now.get(name, float('nan')):.1f}")
            for name, value in then.items()
        )  # fmt: skip
        lines.append(f"  {row['strategy']}: {shown}")
    return lines, differing


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    lines, differing = compare(
        json.loads(args.before.read_text()), json.loads(args.after.read_text())
    )
    print("\n".join(lines))
    return int(differing > 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
