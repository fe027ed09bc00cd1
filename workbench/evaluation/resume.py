"""Carrying an evaluation over a kill or a new machine: checkpoints and resumed runs.

An LLM strategy costs 30-80 s per query on a CPU, so a 50-query run takes hours and a
session or a machine may end in the middle of it; its cached LLM answers may be gone too.
A run therefore appends each result to a checkpoint as it arrives, and a later run given
that checkpoint (or a finished run's JSON) reuses the results it holds instead of asking
the LLM again. Results are reused only from a run with the same knowledge base, query
set, parameters, result size and result-shaping settings; scores are recomputed from the
stored ranking, so a changed metric never mixes with an old one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from workbench.evaluation.metrics import score_query
from workbench.evaluation.query_sets import JudgedQuery
from workbench.evaluation.report import output_path
from workbench.evaluation.runner import QueryResult

# Keys of a run's config that must agree for its results to be reused.
MATCHING_KEYS = ("kb", "query_set", "split", "params", "size")

ResultKey = tuple[str, int, str]  # (strategy, sample of the LLM's answers, query id)


class ResumeError(ValueError):
    """The earlier run cannot be reused: unreadable, or made under another configuration."""


@dataclass
class EarlierRun:
    path: Path
    config: dict[str, Any]
    results: list[QueryResult]


def _result(raw: dict[str, Any], path: Path) -> QueryResult:
    try:
        return QueryResult(**raw)
    except TypeError as exc:
        raise ResumeError(f"{path}: not an evaluation result: {exc}") from None


def load_earlier_run(path: Path) -> EarlierRun:
    """A finished run's ``OUT.json``, or the ``OUT.partial.jsonl`` checkpoint of one that
    stopped: a config line, then one result per line (a torn last line is skipped)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ResumeError(f"{path}: {exc.strerror}") from None
    if path.suffix == ".jsonl":
        lines = [line for line in text.splitlines() if line.strip()]
        records = []
        for number, line in enumerate(lines, 1):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                if number == len(lines):  # the run was killed while writing it
                    break
                raise ResumeError(f"{path}:{number}: not JSON") from None
        if not records or "config" not in records[0]:
            raise ResumeError(f"{path}: no config line; is this an evaluation checkpoint?")
        config, raw_results = records[0]["config"], records[1:]
    else:
        try:
            report = json.loads(text)
            config, raw_results = report["config"], report["queries"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ResumeError(f"{path}: not a `kgqr eval` JSON report") from None
    return EarlierRun(path, config, [_result(raw, path) for raw in raw_results])


def config_differences(earlier: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """What differs between two runs' configs in ways that change rankings: the settings
    this run records (eval.cli.run_config: those the strategies and the hybrid search read).
    Time budgets differ freely between runs; a timed-out rewrite is recorded as a fallback
    in the result itself. An earlier run that recorded more settings is compared on these."""
    differences = [
        f"{key}: {earlier.get(key)!r} then, {now.get(key)!r} now"
        for key in MATCHING_KEYS
        if earlier.get(key) != now.get(key)
    ]
    before, after = earlier.get("settings") or {}, now.get("settings") or {}
    differences += [
        f"setting {name}: {before.get(name)!r} then, {after[name]!r} now"
        for name in sorted(after)
        if before.get(name) != after[name]
    ]
    return differences


def reusable_results(
    runs: Iterable[EarlierRun],
    config: Mapping[str, Any],
    queries: Iterable[JudgedQuery],
    strategies: Iterable[str],
) -> dict[ResultKey, QueryResult]:
    """The earlier results this run would otherwise compute, rescored on today's judgments.
    A later file wins where two hold the same (strategy, sample, query). Results that fell back to
    the plain query are left out and searched again: a run is usually resumed because a
    service failed it, and those are the rewrites that failure spoilt."""
    by_id = {query.id: query for query in queries}
    wanted = set(strategies)
    reused: dict[ResultKey, QueryResult] = {}
    for run in runs:
        differences = config_differences(run.config, config)
        if differences:
            raise ResumeError(
                f"{run.path} was made under another configuration: " + "; ".join(differences)
            )
        for result in run.results:
            query = by_id.get(result.query_id)
            if query is not None and result.strategy in wanted and result.fallback is None:
                scores = score_query(result.ranked, query.judgments)
                key = (result.strategy, result.sample, result.query_id)
                reused[key] = replace(result, scores=scores)
    return reused


class Checkpoint:
    """``STEM.partial.jsonl``: the run's config, then each result as it arrives, flushed,
    so a killed run can be resumed from it. Removed once the full report is written, and
    when a run stops before its first result (there is nothing in it to resume)."""

    def __init__(self, stem: Path, config: Mapping[str, Any]) -> None:
        self.path = output_path(stem, ".partial.jsonl")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._stream = self.path.open("w")
        self._write({"config": dict(config)})
        self.results = 0

    def _write(self, record: Mapping[str, Any]) -> None:
        self._stream.write(json.dumps(record) + "\n")
        self._stream.flush()

    def add(self, result: QueryResult) -> None:
        self._write(asdict(result))
        self.results += 1

    def close(self, *, finished: bool) -> bool:
        """Ends the checkpoint; True when it was kept for a later `--resume`."""
        self._stream.close()
        if finished or not self.results:
            self.path.unlink()
            return False
        return True
