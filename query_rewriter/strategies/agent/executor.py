"""Runs a validated plan: each step one parameterised Neo4j or OpenSearch request.

Every OpenSearch request goes out with the caller's credentials (the strategy context's
search endpoint), so a step only ever sees documents the caller may read; a `follow`
reads Neo4j with kgqr's account, and keeps only the steps whose target document and
source passage the caller may read (one ids query as the caller) before any step uses,
ranks or shows them.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from query_rewriter.strategies.agent.plan import (
    Combine,
    Filter,
    Follow,
    Limit,
    Plan,
    Rank,
    Search,
    Step,
    inputs,
)
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.vector_lookups import by_ids, readable_ids

# A step's result: document id -> score, in rank order (dicts keep insertion order).
Ranked = dict[str, float]
MAX_ROWS = 2_000  # per step: a follow from a hub stops here
FOLLOW_CAP = 500  # per source node
FOLLOW_CHECK_BATCH = 5_000  # edges whose readability one round of ids queries checks


@dataclass
class StepReport:
    id: str
    op: str
    # None for a step whose rows were not read as the caller (a `follow`'s come from
    # Neo4j): its count would tell a caller of documents hidden from them.
    rows: int | None
    ms: float


@dataclass
class PlanRun:
    answer: list[str]
    steps: list[StepReport] = field(default_factory=list)
    # What the plan's searches found (read as the caller), answers or not.
    searched: list[str] = field(default_factory=list)
    # Every id a search or rank step found as the caller, and every document a follow's
    # kept edges rest on (their targets, the passages they were read from). No fetched
    # document names them: a cached rewrite is re-checked against these (Rewrite.sources).
    read: set[str] = field(default_factory=set)

    def explain(self) -> list[dict[str, Any]]:
        return [vars(report) for report in self.steps]


async def execute(plan: Plan, query: str, ctx: StrategyContext) -> PlanRun:
    """The plan's answer (ids the caller may read, best first) and each step's rows and
    time. Bounded: MAX_ROWS per step, the plan's own k's; the caller bounds the time."""
    results: dict[str, Ranked] = {}
    run = PlanRun(answer=[])
    read = read_as_caller(plan)
    for step in plan.steps:
        started = time.perf_counter()
        with ctx.timer.stage("plan"):
            given = [results[name] for name in inputs(step)]
            ranked = await _run(step, given, query, ctx, run.read)
        results[step.id] = dict(list(ranked.items())[:MAX_ROWS])
        if isinstance(step, Search):
            run.searched.extend(results[step.id])
        if isinstance(step, Search | Rank):
            run.read.update(results[step.id])
        elapsed = round((time.perf_counter() - started) * 1000, 1)
        rows = len(results[step.id]) if read[step.id] else None
        run.steps.append(StepReport(step.id, step.op, rows, elapsed))
    answer = list(results[plan.answer_step])
    if not read[plan.answer_step]:
        allowed = await readable_ids(ctx, ctx.index, set(answer))
        answer = [node for node in answer if node in allowed]
    run.answer = answer
    return run


def read_as_caller(plan: Plan) -> dict[str, bool]:
    """Whether each step's rows all came from OpenSearch as the caller. A `follow`'s come
    from Neo4j: it keeps only targets the caller may read (or entities, which have no
    document), and an answer holding them is still read back before it is shown, which
    leaves out the entities. A search, filter or rank is itself a request with the
    caller's credentials."""
    read: dict[str, bool] = {}
    for step in plan.steps:
        if isinstance(step, Search | Filter | Rank):
            read[step.id] = True
        elif isinstance(step, Combine):
            given = [read[name] for name in step.of]
            read[step.id] = all(given) if step.op == "union" else any(given)
        elif isinstance(step, Limit):
            read[step.id] = read[step.from_]
        else:
            read[step.id] = False
    return read


async def _run(
    step: Step, given: list[Ranked], query: str, ctx: StrategyContext, read: set[str]
) -> Ranked:
    if isinstance(step, Search):
        return await _search(step, ctx)
    if isinstance(step, Follow):
        return await _follow(step, given[0], ctx, read)
    if isinstance(step, Filter):
        return await _filter(step, given[0], query, ctx)
    if isinstance(step, Rank):
        return await _rank(step, given[0], ctx)
    if isinstance(step, Combine):
        return _combine(step.op, given)
    if isinstance(step, Limit):
        return dict(list(given[0].items())[: step.k])
    raise AssertionError(f"unhandled step {step!r}")


async def _follow(step: Follow, sources: Ranked, ctx: StrategyContext, read: set[str]) -> Ranked:
    if not sources:
        return {}
    edges = await ctx.knowledge_graph().follow(
        ctx.kb, list(sources), step.relation, step.direction, step.type, FOLLOW_CAP
    )
    # Read as the caller before anything goes on: a chain of follows once went on from
    # documents hidden from the caller (only the plan's answer was read back), and a
    # limit after a follow cut before the hidden ones were dropped. Best sources first,
    # until the step has the MAX_ROWS it keeps: a target scores its best source's score,
    # so later edges could only add targets that rank below those.
    edges = sorted(edges, key=lambda edge: -sources[edge.source])
    reached: Ranked = {}
    for at in range(0, len(edges), FOLLOW_CHECK_BATCH):
        batch = edges[at : at + FOLLOW_CHECK_BATCH]
        allowed = await readable_ids(ctx, ctx.index, set().union(*(e.evidence() for e in batch)))
        for edge in batch:
            if edge.evidence() <= allowed:
                reached[edge.target] = max(reached.get(edge.target, 0.0), sources[edge.source])
                read.update(item for item in edge.evidence() if isinstance(item, str))
        if len(reached) >= MAX_ROWS:
            break
    return dict(sorted(reached.items(), key=lambda item: -item[1]))


async def _search(step: Search, ctx: StrategyContext) -> Ranked:
    """The step's hits by id alone (search_ids): the plan reads nothing else of them, and
    fetching whole documents, vectors included, cost a search more than the engine's
    ranking did."""
    filters = [{"term": {"type": step.type}}] if step.type else []
    if step.by == "hybrid":
        hits = await ctx.plain_hits(step.text, step.k, None, stage="plan_search", filters=filters)
    else:
        # By title: the map's (an attached index without one: its words anywhere).
        title = ctx.title_field
        match = {"match": {title: step.text}} if title else {"multi_match": {"query": step.text}}
        body = {"size": step.k, "query": {"bool": {"must": [match], "filter": filters}}}
        hits = await ctx.search_ids(ctx.index, body)
    return {hit["_id"]: 1.0 / (rank + 1) for rank, hit in enumerate(hits)}


async def _rank(step: Rank, candidates: Ranked, ctx: StrategyContext) -> Ranked:
    """The candidates ordered by the KB's hybrid search for the text, restricted to them:
    BM25 catches the words a question names, k-NN the meaning."""
    if not candidates:
        return {}
    ids = [{"ids": {"values": list(candidates)}}]
    # k-NN's k is at least the candidates' number, so every candidate the caller may read
    # comes back; one that does not is one the caller may not see.
    hits = await ctx.plain_hits(step.text, len(candidates), None, stage="plan_rank", filters=ids)
    return {hit["_id"]: 1.0 / (rank + 1) for rank, hit in enumerate(hits)}


async def _filter(step: Filter, candidates: Ranked, query: str, ctx: StrategyContext) -> Ranked:
    if not candidates:
        return {}
    sources = await by_ids(ctx, ctx.index, list(candidates), ["fields"])
    words = set(re.findall(r"\w+", query.lower()))
    kept: Ranked = {}
    for node, score in candidates.items():
        value = (sources.get(node, {}).get("fields") or {}).get(step.field)
        if value is not None and matches(step.cmp, value, step.value, words):
            kept[node] = score
    return kept


def matches(cmp: str, value: Any, wanted: Any, query_words: set[str]) -> bool:
    """Whether a document's field `value` passes `cmp` against `wanted`; numbers compare
    as numbers, text without case; `mentioned`: the value's words all occur in the query."""
    values = value if isinstance(value, list) else [value]
    return any(_one(cmp, item, wanted, query_words) for item in values)


def _one(cmp: str, value: Any, wanted: Any, query_words: set[str]) -> bool:
    if cmp == "mentioned":
        words = re.findall(r"\w+", str(value).lower())
        return bool(words) and set(words) <= query_words
    if cmp == "contains":
        return str(wanted).lower() in str(value).lower()
    number, target = _number(value), _number(wanted)
    if number is not None and target is not None:
        return {
            "eq": number == target, "ne": number != target, "lt": number < target,
            "lte": number <= target, "gt": number > target, "gte": number >= target,
        }[cmp]  # fmt: skip
    if cmp in ("eq", "ne"):
        same = str(value).strip().lower() == str(wanted).strip().lower()
        return same if cmp == "eq" else not same
    return False  # an order comparison between text and a number never holds


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _combine(op: str, given: list[Ranked]) -> Ranked:
    if op == "union":
        merged: Ranked = {}
        for ranked in given:
            for node, score in ranked.items():
                merged[node] = max(merged.get(node, 0.0), score)
        return dict(sorted(merged.items(), key=lambda item: -item[1]))
    common = set(given[0]).intersection(*given[1:])
    return {node: sum(r[node] for r in given) for node in given[0] if node in common}
