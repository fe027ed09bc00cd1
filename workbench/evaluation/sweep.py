"""One-parameter-at-a-time sweeps of a strategy over several datasets, and their plots.

Each parameter is varied over its grid while the others keep their configured values, so
a plot reads as "what this knob does" (the KAR paper's sensitivity figures), not as a
cartesian search. Cached LLM answers make repeated points cost no LLM time. Every point is
compared, query by query, to a baseline strategy; and what the sweep reports as its result
is cross-validated: the setting each fold's training queries choose, scored on that fold.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.evaluation.cross_validation import Candidate, CrossValidated, cross_validate
from workbench.evaluation.query_sets import JudgedQuery
from workbench.evaluation.report import output_path
from workbench.evaluation.resume import (
    Checkpoint,
    ResultKey,
    ResumeError,
    load_earlier_run,
    reusable_results,
)
from workbench.evaluation.runner import (
    EvalReport,
    EvalTarget,
    QueryResult,
    StrategyReport,
    evaluate,
    run_identity,
)
from workbench.evaluation.significance import PairedComparison, compare_runs

# Swept when no --grid is given: those of these the strategy reads.
DEFAULT_GRID: dict[str, list[float]] = {
    "rewrite.alpha": [0.3, 0.5, 0.7, 1.0],
    "knn.k": [10, 20, 50, 100],
    "kar.k": [3, 5, 10, 20, 40],
    "kar.h": [1, 2],
    "rewrite.n": [1, 3],
    "graph.damping": [0.3, 0.5, 0.7],
    "graph.weight": [0.2, 0.4, 0.6, 0.8],
    "graph.walk_share": [0.25, 0.5, 0.75],
    "graph.bridges": [1, 3, 5],
}


@dataclass(frozen=True)
class Dataset:
    name: str
    kb: str
    queries: Sequence[JudgedQuery]
    target: EvalTarget | None = None  # None: kgqr's own index of `kb`
    query_set: str = ""  # its KIND:PATH, which a point's checkpoint is matched by


@dataclass
class PointCheckpoints:
    """Each evaluation of a sweep (a dataset at one setting) checkpointed in `folder` as
    `kgqr eval run` checkpoints a run, while the sweep lasts: the longest job of the tool
    kept its points in memory, and a Ctrl-C or a failed search at point N lost every point
    before it. Run again with the same folder, a sweep reuses what a checkpoint holds of
    the same configuration (`config`: eval.cli.run_config) and searches the rest."""

    folder: Path
    config: Mapping[str, Any]
    reused: int = 0

    def open(
        self, dataset: Dataset, strategies: Sequence[str], params: Mapping[str, float], size: int
    ) -> tuple[Checkpoint, dict[ResultKey, QueryResult]]:
        identity = run_identity(dataset.kb, params, size,
                                {**self.config, "query_set": dataset.query_set})  # fmt: skip
        named = json.dumps([dataset.name, sorted(strategies), sorted(params.items())])
        stem = self.folder / f"{dataset.name}-{hashlib.sha1(named.encode()).hexdigest()[:12]}"
        reuse: dict[ResultKey, QueryResult] = {}
        earlier = output_path(stem, ".partial.jsonl")
        if earlier.exists():
            try:
                reuse = reusable_results([load_earlier_run(earlier)], identity,
                                         dataset.queries, strategies)  # fmt: skip
            except ResumeError:
                reuse = {}  # another configuration's: searched afresh
        self.reused += len(reuse)
        # Opened anew, the file is empty: what it held goes back in at once (written as
        # `evaluate` reached each, a Ctrl-C while it waited for the graph's copy emptied
        # the checkpoint, and a stopped run's hours of LLM time with it).
        checkpoint = Checkpoint(stem, identity)
        for result in reuse.values():
            checkpoint.add(result)
        return checkpoint, reuse

    def remove(self) -> None:
        """Once the sweep's summary is written, nothing in them is needed."""
        shutil.rmtree(self.folder, ignore_errors=True)


@dataclass
class SweepPoint:
    dataset: str
    param: str
    value: float
    report: StrategyReport
    per_query: dict[str, dict[str, float]]

    @property
    def setting(self) -> str:
        return f"{self.param}={self.value:g}"


CONFIGURED = "configured"  # the candidate at the strategy's configured parameters


@dataclass
class SweepRun:
    """Every point, and per dataset the strategy at its configured parameters and the
    baseline strategy, each with per-query scores (query id -> metric -> score)."""

    strategy: str
    baseline: str
    points: list[SweepPoint]
    configured: dict[str, dict[str, dict[str, float]]]
    baselines: dict[str, dict[str, dict[str, float]]]

    def point_comparisons(self, metrics: Sequence[str]) -> dict[int, list[PairedComparison]]:
        """Each point (by position) against the baseline on its dataset's queries."""
        return {
            number: self.against_baseline(p.dataset, p.per_query, metrics)
            for number, p in enumerate(self.points)
        }

    def against_baseline(
        self, dataset: str, per_query: dict[str, dict[str, float]], metrics: Sequence[str]
    ) -> list[PairedComparison]:
        runs = {self.baseline: self.baselines[dataset], "candidate": per_query}
        return compare_runs(runs, self.baseline, metrics)

    def cross_validated(
        self, dataset: str, metric: str, folds: int, seed: int = 0
    ) -> CrossValidated:
        """The setting chosen on each fold's training queries (the configured one first,
        so it wins ties), scored on the held-out ones."""
        candidates = [Candidate(CONFIGURED, self.configured[dataset])]
        candidates += [Candidate(p.setting, p.per_query) for p in self.points
                       if p.dataset == dataset]  # fmt: skip
        return cross_validate(candidates, metric, folds, seed)


async def run_sweep(
    proxy_url: str,
    datasets: Sequence[Dataset],
    strategy: str,
    grid: dict[str, list[float]],
    base_params: dict[str, float],
    *,
    baseline: str,
    size: int,
    concurrency: int,
    headers: Mapping[str, str] | None = None,
    on_point: Callable[[SweepPoint], None] | None = None,
    checkpoints: PointCheckpoints | None = None,
) -> SweepRun:
    pacing: dict[str, Any] = {"size": size, "concurrency": concurrency, "headers": headers}

    async def evaluated(dataset: Dataset, names: list[str], params: dict[str, float]) -> EvalReport:
        if checkpoints is None:
            return await evaluate(proxy_url, dataset.kb, dataset.queries, names, params,
                                  **pacing, target=dataset.target)  # fmt: skip
        checkpoint, reuse = checkpoints.open(dataset, names, params, size)

        def searched(result: QueryResult) -> None:
            if (result.strategy, result.sample, result.query_id) not in reuse:
                checkpoint.add(result)

        try:
            return await evaluate(proxy_url, dataset.kb, dataset.queries, names, params,
                                  **pacing, target=dataset.target, reuse=reuse,
                                  on_result=searched)  # fmt: skip
        finally:
            checkpoint.close(finished=False)  # kept (unless empty) until the sweep ends

    configured, baselines = {}, {}
    for dataset in datasets:
        names = [strategy] if baseline == strategy else [strategy, baseline]
        report = await evaluated(dataset, names, base_params)
        runs = report.per_query()
        configured[dataset.name], baselines[dataset.name] = runs[strategy], runs[baseline]
    points = []
    for param, values in grid.items():
        for value in values:
            for dataset in datasets:
                report = await evaluated(dataset, [strategy], {**base_params, param: value})
                point = SweepPoint(
                    dataset.name, param, value, report.strategies[0], report.per_query()[strategy]
                )
                points.append(point)
                if on_point is not None:
                    on_point(point)
    return SweepRun(strategy, baseline, points, configured, baselines)


def plot_parameter(
    points: Sequence[SweepPoint], param: str, metrics: Sequence[str], path: Path
) -> Path:
    """A PNG with one panel per metric: metric (percent) against the parameter's value,
    one line per dataset."""
    import matplotlib

    matplotlib.use("Agg")  # no display here, and plots are files
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(metrics), figsize=(4.5 * len(metrics), 3.6), squeeze=False)
    chosen = [p for p in points if p.param == param]
    for axis, metric in zip(axes[0], metrics, strict=True):
        values = [100 * p.report.metrics[metric] for p in chosen] or [0.0]
        # Percent axes stay within 0-100, with room to see small differences.
        axis.set_ylim(max(0.0, min(values) - 5), min(100.0, max(values) + 5) + 0.5)
        for dataset in dict.fromkeys(p.dataset for p in chosen):
            line = sorted(
                (p.value, 100 * p.report.metrics[metric]) for p in chosen if p.dataset == dataset
            )
            axis.plot([x for x, _ in line], [y for _, y in line], marker="o", label=dataset)
        axis.set_xlabel(param)
        axis.set_ylabel(f"{metric} (%)")
        axis.grid(alpha=0.3)
        axis.legend()
    figure.suptitle(f"{chosen[0].report.strategy if chosen else ''}: sweep of {param}")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
