"""Runs judged queries through strategies via a kgqr proxy and scores what comes back.

Evaluation goes through the proxy's HTTP API, the path a search team's client takes, so
the figures include everything a real search pays (rewrite, embedding, hybrid search).
Each search asks for ``kgqr.explain`` to learn about fallbacks and LLM calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
import numpy as np

from plugin.field_map import FieldMap
from plugin.schema import documents_index
from query_rewriter.strategies import STRATEGIES
from workbench.evaluation.graph_copy_wait import wait_for_graph_copy
from workbench.evaluation.metrics import (
    METRIC_NAMES,
    latency_percentiles,
    mean_scores,
    score_query,
)
from workbench.evaluation.query_sets import JudgedQuery
from workbench.evaluation.significance import PairedComparison, compare_runs


@dataclass
class QueryResult:
    query_id: str
    strategy: str
    ranked: list[str]
    seconds: float
    scores: dict[str, float]
    fallback: str | None = None
    llm_calls: int = 0
    cached_llm_calls: int = 0
    stages_ms: dict[str, float] = field(default_factory=dict)
    sample: int = 0  # which draw of the LLM's answers (KGQR_LLM_SAMPLE) made the rewrite


def sample_label(strategy: str, sample: int) -> str:
    """The first draw of the LLM's answers keeps the strategy's name; the second is "kar #2"."""
    return strategy if sample == 0 else f"{strategy} #{sample + 1}"


@dataclass
class StrategyReport:
    strategy: str
    queries: int
    metrics: dict[str, float]
    latency: dict[str, float]
    fallbacks: int
    llm_calls: int
    cached_llm_calls: int
    sample: int = 0

    @classmethod
    def of(cls, strategy: str, results: Sequence[QueryResult], sample: int = 0) -> StrategyReport:
        return cls(
            strategy=strategy,
            queries=len(results),
            metrics=mean_scores([r.scores for r in results]),
            latency=latency_percentiles([r.seconds for r in results]),
            fallbacks=sum(r.fallback is not None for r in results),
            llm_calls=sum(r.llm_calls for r in results),
            cached_llm_calls=sum(r.cached_llm_calls for r in results),
            sample=sample,
        )

    @property
    def label(self) -> str:
        return sample_label(self.strategy, self.sample)


@dataclass
class EvalReport:
    config: dict[str, Any]
    strategies: list[StrategyReport]
    results: list[QueryResult] = field(default_factory=list)

    def per_query(self) -> dict[str, dict[str, dict[str, float]]]:
        """Run label ("kar", "kar #2") -> query id -> that query's scores."""
        runs: dict[str, dict[str, dict[str, float]]] = {}
        for result in self.results:
            runs.setdefault(sample_label(result.strategy, result.sample), {})[result.query_id] = (
                result.scores
            )
        return runs

    def comparisons(self, metrics: Sequence[str] = METRIC_NAMES) -> list[PairedComparison]:
        """Every run against the baseline the config names, paired by query (none when
        the baseline was not run). Against its first draw: a run started at a later draw
        of the LLM's answers (KGQR_LLM_SAMPLE=1) labels every run from "#2" on, base's too."""
        baseline = self.config.get("baseline")
        draws = sorted(s.sample for s in self.strategies if s.strategy == baseline)
        if baseline is None or not draws:
            return []
        return compare_runs(self.per_query(), sample_label(baseline, draws[0]), metrics)

    def to_json(self) -> dict[str, Any]:
        spread = sample_spread(self.strategies)
        return {
            "config": self.config,
            "strategies": [asdict(s) for s in self.strategies],
            **({"sample_spread": spread} if spread else {}),
            "comparisons": [c.as_json() for c in self.comparisons()],
            "queries": [asdict(r) for r in self.results],
        }


def sample_spread(reports: Sequence[StrategyReport]) -> dict[str, dict[str, dict[str, float]]]:
    """For each strategy run on more than one draw of the LLM's answers: every metric's
    mean, min and max over the draws. One draw's figure differs from another's by more than
    many a setting changes them, so a comparison should hold on the mean and the range."""
    by_strategy: dict[str, list[StrategyReport]] = {}
    for report in reports:
        by_strategy.setdefault(report.strategy, []).append(report)
    return {
        strategy: {
            metric: _mean_and_range([draw.metrics[metric] for draw in draws])
            for metric in draws[0].metrics
        }
        for strategy, draws in by_strategy.items()
        if len(draws) > 1
    }


def _mean_and_range(values: Sequence[float]) -> dict[str, float]:
    return {"mean": float(np.mean(values)), "min": min(values), "max": max(values)}


def merge_samples(reports: Sequence[EvalReport]) -> EvalReport:
    """The runs of one evaluation on successive draws of the LLM's answers, as one report
    (the first run's config, saying how many draws there were)."""
    first = reports[0]
    config = {**first.config, "samples": len(reports)}
    strategies = [strategy for report in reports for strategy in report.strategies]
    results = [result for report in reports for result in report.results]
    return EvalReport(config, strategies, results)


@dataclass(frozen=True)
class EvalTarget:
    """Where a knowledge base's judged queries are searched: its index and the fields its
    words are in, as its own clients search them (kgqr's: kgqr-KB-documents, `text`)."""

    index: str
    fields: tuple[str, ...] = ("text",)

    @classmethod
    def of(cls, kb: str, attached: FieldMap | None) -> EvalTarget:
        """An attached index is searched in its mapped text fields (with their boosts), or
        its title and body fields when the team named none."""
        if attached is None:
            return cls(documents_index(kb))
        fields = attached.boosted_text_fields() or [
            name for name in (attached.title_field, attached.body_field) if name
        ]
        if not fields:
            raise EvalError(
                f"{kb} is attached with no text, title or body field to search: attach it "
                "again with --text FIELD"
            )
        return cls(attached.index, tuple(fields))

    def query(self, text: str) -> dict[str, Any]:
        if self.fields == ("text",):
            return {"match": {"text": text}}
        return {"multi_match": {"query": text, "fields": list(self.fields)}}


def read_by(strategy: str, params: Mapping[str, float]) -> dict[str, float]:
    """The parameters `strategy` reads (its own and the common ones, by name or old name):
    a run comparing strategies, or a sweep's baseline, sends none a strategy would refuse."""
    readable = STRATEGIES[strategy].readable_params if strategy in STRATEGIES else ()
    names = {param.name for param in readable} | {param.legacy for param in readable}
    return {name: value for name, value in params.items() if name in names}


def search_request(
    query: JudgedQuery, strategy: str, params: dict[str, float], size: int, target: EvalTarget
) -> tuple[dict[str, str], dict[str, Any]]:
    """Query-string parameters and body of one evaluated search."""
    query_params = {"kgqr.strategy": strategy, "kgqr.explain": "true"}
    given = read_by(strategy, params)
    query_params.update({f"kgqr.param.{name}": str(value) for name, value in given.items()})
    body = {"query": target.query(query.text), "size": size, "_source": False}
    return query_params, body


class EvalError(RuntimeError):
    """The proxy refused an evaluated search; evaluation stops rather than score errors."""


async def run_query(
    client: httpx.AsyncClient,
    target: EvalTarget,
    query: JudgedQuery,
    strategy: str,
    params: dict[str, float],
    size: int,
    sample: int = 0,
) -> QueryResult:
    index = target.index
    query_params, body = search_request(query, strategy, params, size, target)
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        response = await client.post(f"/{index}/_search", params=query_params, json=body)
    except httpx.TransportError as exc:
        raise EvalError(f"the kgqr proxy at {client.base_url} did not answer: {exc!r}") from exc
    seconds = loop.time() - started
    if response.status_code == 404 and "index_not_found_exception" in response.text:
        raise EvalError(
            f"no index {index!r}: is the knowledge base ingested? "
            "(`kgqr ingest SOURCE --kb NAME`; `kgqr ingest verify --kb NAME` shows what is there)"
        )
    if response.status_code != 200:
        raise EvalError(
            f"{strategy} on {query.id!r}: HTTP {response.status_code} {response.text[:300]}"
        )
    answer = response.json()
    ranked = [hit["_id"] for hit in answer["hits"]["hits"]]
    explain = answer.get("kgqr") or {}
    fallback = explain.get("fallback")
    return QueryResult(
        query_id=query.id,
        strategy=strategy,
        ranked=ranked,
        seconds=seconds,
        scores=score_query(ranked, query.judgments),
        fallback=f"{fallback['stage']}: {fallback['reason']}" if fallback else None,
        llm_calls=int(explain.get("llm_calls", 0)),
        cached_llm_calls=int(explain.get("cached_llm_calls", 0)),
        stages_ms=dict(explain.get("stages_ms") or {}),
        sample=sample,
    )


async def evaluate(
    proxy_url: str,
    kb: str,
    queries: Sequence[JudgedQuery],
    strategies: Sequence[str],
    params: dict[str, float] | None = None,
    *,
    size: int = 20,
    concurrency: int = 1,
    timeout_s: float = 900.0,
    on_result: Callable[[QueryResult], None] | None = None,
    config: dict[str, Any] | None = None,
    reuse: Mapping[tuple[str, int, str], QueryResult] | None = None,
    sample: int = 0,
    headers: Mapping[str, str] | None = None,
    target: EvalTarget | None = None,
) -> EvalReport:
    """Every (strategy, query) pair, `concurrency` searches at a time; strategies run one
    after another so their latencies do not inflate each other. Pairs found in `reuse`
    (keyed by strategy, sample and query id: an earlier run's results) are not searched
    again. `sample` is the proxy's KGQR_LLM_SAMPLE, recorded with each result. `headers`:
    the credentials of the user searching (the proxy searches as them)."""
    params = dict(params or {})
    reuse = reuse or {}
    target = target or EvalTarget(documents_index(kb))
    limiter = asyncio.Semaphore(max(1, concurrency))
    # Set by the first failed search before it frees its slot, so the search queued behind
    # it is never started: it would be abandoned mid-request (an LLM rewrite paid for and
    # dropped, and an anyio connect task cancelled before it ran).
    failed = asyncio.Event()
    all_results: list[QueryResult] = []
    reports = []
    async with httpx.AsyncClient(
        base_url=proxy_url, timeout=timeout_s, headers=dict(headers or {})
    ) as client:

        async def one(query: JudgedQuery, strategy: str) -> QueryResult:
            result = reuse.get((strategy, sample, query.id))
            if result is None:
                async with limiter:
                    if failed.is_set():
                        raise EvalError("not searched: an earlier search failed")
                    try:
                        result = await run_query(
                            client, target, query, strategy, params, size, sample
                        )
                    except BaseException:
                        failed.set()
                        raise
            if on_result is not None:
                on_result(result)
            return result

        reads_graph = any(STRATEGIES[name].reads_graph for name in strategies if name in STRATEGIES)
        graph_source = (
            await wait_for_graph_copy(client, target.index, target.query) if reads_graph else None
        )
        for strategy in strategies:
            results = await asyncio.gather(*(one(q, strategy) for q in queries))
            all_results.extend(results)
            reports.append(StrategyReport.of(strategy, results, sample))
    run_config = {
        "queries": len(queries),
        "strategies": list(strategies),
        **run_identity(kb, params, size, config),
    }
    if reads_graph:
        run_config["graph_source"] = graph_source  # where the run's graph reads went
    return EvalReport(run_config, reports, all_results)


def run_identity(
    kb: str, params: Mapping[str, Any], size: int, config: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The part of a report's config that says which run made it. A checkpoint records the
    same so that `--resume` compares like with like, whichever file it is given."""
    return {"kb": kb, "params": dict(params), "size": size, **(config or {})}
