"""One evaluation as a printed table, a JSON file and a CSV file."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from workbench.evaluation.metrics import METRIC_NAMES
from workbench.evaluation.runner import EvalReport, sample_spread

COLUMNS = ["strategy", *METRIC_NAMES, "p50_ms", "p95_ms", "fallbacks", "llm_calls", "cached"]
SPREAD_COLUMNS = ("Hit@1", "R@2", "R@5", "R@10", "MRR")


def rows(report: EvalReport) -> list[dict[str, str | float | int]]:
    """One row per strategy; metrics in percent, as papers and the README print them."""
    return [
        {
            "strategy": s.label,
            **{name: round(100 * s.metrics.get(name, 0.0), 1) for name in METRIC_NAMES},
            "p50_ms": round(s.latency["p50_ms"], 1),
            "p95_ms": round(s.latency["p95_ms"], 1),
            "fallbacks": s.fallbacks,
            "llm_calls": s.llm_calls,
            "cached": s.cached_llm_calls,
        }
        for s in report.strategies
    ]


def format_table(report: EvalReport) -> str:
    table = rows(report)
    widths = {c: max(len(c), *(len(str(r[c])) for r in table)) for c in COLUMNS}
    lines = ["  ".join(c.rjust(widths[c]) for c in COLUMNS)]
    lines += ["  ".join(str(r[c]).rjust(widths[c]) for c in COLUMNS) for r in table]
    for strategy, metrics in sample_spread(report.strategies).items():
        draws = sum(s.strategy == strategy for s in report.strategies)
        shown = "  ".join(
            f"{name} {100 * metrics[name]['mean']:.1f} "
            f"({100 * metrics[name]['min']:.1f}-{100 * metrics[name]['max']:.1f})"
            for name in SPREAD_COLUMNS
        )
        lines.append(f"{strategy} over {draws} draws, mean (min-max): {shown}")
    llm = sum(s.llm_calls for s in report.strategies)
    cached = sum(s.cached_llm_calls for s in report.strategies)
    reused = report.config.get("reused_results")
    lines.append(
        f"{report.config['queries']} queries on knowledge base {report.config['kb']!r}; "
        f"LLM calls {llm}, of which {cached} answered from the cache"
        + (f"; {reused} results reused from earlier runs" if reused else "")
    )
    return "\n".join(lines)


def write_outputs(report: EvalReport, stem: Path) -> tuple[Path, Path]:
    """``STEM.json`` (config, per-strategy and per-query results) and ``STEM.csv``."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = stem.with_suffix(".json"), stem.with_suffix(".csv")
    json_path.write_text(json.dumps(report.to_json(), indent=1) + "\n")
    with csv_path.open("w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows(report))
    return json_path, csv_path
