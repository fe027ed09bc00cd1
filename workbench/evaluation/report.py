"""One evaluation as a printed table, a JSON file and a CSV file."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from workbench.evaluation.metrics import METRIC_NAMES
from workbench.evaluation.runner import EvalReport, sample_spread

COLUMNS = ["strategy", *METRIC_NAMES, "p50_ms", "p95_ms", "fallbacks", "llm_calls", "cached"]
SPREAD_COLUMNS = ("Hit@1", "R@2", "R@5", "R@10", "MRR")
# The metrics the printed table compares to the baseline (JSON and CSV carry every one).
COMPARED_IN_TABLE = ("R@5", "MRR", "nDCG@10")
# Per metric, what the CSV says of a run against the baseline (percent points, like rows).
COMPARISON_FIELDS = ("diff", "low", "high", "p", "wins", "losses")
COMPARISON_COLUMNS = [f"{m} {field}" for m in METRIC_NAMES for field in COMPARISON_FIELDS]


def rows(report: EvalReport) -> list[dict[str, str | float | int]]:
    """One row per strategy; metrics in percent, as papers and the README print them, and
    each metric's paired difference to the baseline (blank on the baseline's own row)."""
    compared: dict[str, dict[str, str | float | int]] = {}
    for c in report.comparisons():
        compared.setdefault(c.strategy, {}).update({
            f"{c.metric} diff": round(100 * c.difference, 2),
            f"{c.metric} low": round(100 * c.low, 2),
            f"{c.metric} high": round(100 * c.high, 2),
            f"{c.metric} p": round(c.p_value, 4),
            f"{c.metric} wins": c.wins,
            f"{c.metric} losses": c.losses,
        })  # fmt: skip
    return [
        {
            "strategy": s.label,
            **{name: round(100 * s.metrics.get(name, 0.0), 1) for name in METRIC_NAMES},
            "p50_ms": round(s.latency["p50_ms"], 1),
            "p95_ms": round(s.latency["p95_ms"], 1),
            "fallbacks": s.fallbacks,
            "llm_calls": s.llm_calls,
            "cached": s.cached_llm_calls,
            **compared.get(s.label, {}),
        }
        for s in report.strategies
    ]


def comparison_lines(report: EvalReport) -> list[str]:
    """Each run against the baseline on the table's headline metrics, in percent points."""
    shown = report.comparisons(COMPARED_IN_TABLE)
    if not shown:
        return []
    lines = [
        f"against {shown[0].baseline}, paired over {shown[0].queries} queries: difference "
        f"[95% bootstrap interval] randomization p, wins/losses; an interval holding 0 is "
        f"not shown to differ"
    ]
    width = max(len(c.strategy) for c in shown)
    for strategy in dict.fromkeys(c.strategy for c in shown):
        parts = [f"{c.metric} {c.as_text()}" for c in shown if c.strategy == strategy]
        lines.append(f"  {strategy.ljust(width)}  " + " | ".join(parts))
    return lines


def format_table(report: EvalReport) -> str:
    table = rows(report)
    widths = {c: max(len(c), *(len(str(r[c])) for r in table)) for c in COLUMNS}
    lines = ["  ".join(c.rjust(widths[c]) for c in COLUMNS)]
    lines += ["  ".join(str(r[c]).rjust(widths[c]) for c in COLUMNS) for r in table]
    lines += comparison_lines(report)
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


OUTPUT_SUFFIXES = (".json", ".csv", ".jsonl")


def output_path(stem: Path, suffix: str) -> Path:
    """STEM with `suffix` added (or in place of one of the run's own: `--out run.json`).
    A stem's dot is kept: `kar-alpha0.5` and `kar-alpha0.3` each became `kar-alpha0.json`,
    and the second run wrote over the first, its checkpoint too."""
    if stem.suffix in OUTPUT_SUFFIXES:
        return stem.with_suffix(suffix)
    return stem.with_name(stem.name + suffix)


def write_outputs(report: EvalReport, stem: Path) -> tuple[Path, Path]:
    """``STEM.json`` (config, per-strategy and per-query results) and ``STEM.csv``."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = output_path(stem, ".json"), output_path(stem, ".csv")
    json_path.write_text(json.dumps(report.to_json(), indent=1) + "\n")
    with csv_path.open("w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=[*COLUMNS, *COMPARISON_COLUMNS])
        writer.writeheader()
        writer.writerows(rows(report))
    return json_path, csv_path
