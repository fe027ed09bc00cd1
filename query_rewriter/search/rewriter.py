"""One query through one strategy: cache, coalescing, timeout, fallback, embedding, fusion.

A strategy that fails or runs out of time is replaced by the plain query (``base``) and
the result says which stage failed; if even embedding fails, the caller forwards the
client's original request. A rewrite never fails a search.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from kgqr_core.field_evidence import FieldEvidence
from kgqr_core.llm import AsyncLlmClient, CallerLlm
from kgqr_core.outage_notice import OnceEvery
from kgqr_core.settings import Settings
from plugin.kb_meta import DocumentStructure, KnowledgeBaseMeta, MetaUnreadable
from query_rewriter import metrics
from query_rewriter.engine.errors import failure_reason, redact_addresses
from query_rewriter.engine.hybrid_query import SearchFields, fuse, mean_vector
from query_rewriter.engine.query_text import ParsedQuery
from query_rewriter.search.cache import RewriteCache, rewrite_key
from query_rewriter.search.evidence import RecordingSearch, still_readable
from query_rewriter.search.explain import Budget, Explain, Fallback
from query_rewriter.search.query_embedders import (
    EmbedderLoading,
    EmbedderRefused,
    QueryEmbedders,
    no_vectors,
)
from query_rewriter.search.side_vectors import SideVectorReads
from query_rewriter.strategies import STRATEGIES
from query_rewriter.strategies.agent.plan_book import book_of
from query_rewriter.strategies.base import Strategy
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.params import ALPHA, param_value
from query_rewriter.strategies.rewrite import LlmUsage, Rewrite, StageTimer
from query_rewriter.strategies.services import (
    Embed,
    Graph,
    OwnReadsCheck,
    Search,
    SideVectorScores,
)
from query_rewriter.strategies.text_facts import TEXT_NOT_SHOWN

log = logging.getLogger("kgqr.rewrite")


@dataclass
class RewriteOutcome:
    rewrite: Rewrite
    vector: list[float] | None
    alpha: float
    stages_ms: dict[str, float] = field(default_factory=dict)
    fallback: Fallback | None = None
    cached: bool = False
    llm: LlmUsage = field(default_factory=LlmUsage)
    budget: Budget | None = None
    # The KB documents its searches returned as the caller (search/evidence.py).
    evidence: list[str] = field(default_factory=list)
    # The field evidence its graph edges needed the caller to see, in stored form.
    field_evidence: list[list[str]] = field(default_factory=list)
    # The query's own vector, unfused: the plain ranking fusion protects (plain_fusion.py).
    plain_vector: list[float] | None = None

    def explain(self, final_query: dict[str, Any] | None) -> Explain:
        return {
            "strategy": self.rewrite.strategy,
            "query": self.rewrite.query,
            "expansions": self.rewrite.expansions,
            "context": self.rewrite.context,
            "details": self.rewrite.details,
            "alpha": self.alpha,
            "stages_ms": self.stages_ms,
            "fallback": self.fallback,
            "budget": self.budget,
            "cached": self.cached,
            "llm_calls": self.llm.calls,
            "cached_llm_calls": self.llm.cached,
            "llm_prompt_chars": self.llm.prompt_chars,
            "final_query": final_query,
        }

    def to_cache(self) -> dict[str, Any]:
        return {
            "rewrite": self.rewrite.__dict__,
            "vector": self.vector,
            "alpha": self.alpha,
            "stages_ms": self.stages_ms,
            "llm": self.llm.__dict__,
            "evidence": self.evidence,
            "field_evidence": self.field_evidence,
            "plain_vector": self.plain_vector,
        }

    @classmethod
    def from_cache(cls, data: dict[str, Any]) -> RewriteOutcome:
        return cls(
            Rewrite(**data["rewrite"]),
            data["vector"],
            data["alpha"],
            data["stages_ms"],
            None,
            cached=True,
            llm=LlmUsage(**data["llm"]),
            evidence=list(data["evidence"]),
            field_evidence=list(data.get("field_evidence", [])),
            plain_vector=data["plain_vector"],
        )


VECTOR_KEPT = "not fused: a vector query's matches are its own vector's nearest"


_fallback_warnings = OnceEvery()  # by strategy and stage: bounded


def record_fallback(
    strategy: str, stage: str, reason: str, exc: BaseException | None = None
) -> Fallback:
    """The explain's `fallback`, logged and counted. The log keeps the whole reason and
    the exception's own message; the explain, which a client reads, names no address.
    A warning once a minute per strategy and stage, the rest at INFO: many fallbacks are
    a caller's to cause (a query naming nothing in the graph, their share of rewrites
    taken, a search the engine refuses), and one caller's loop of them buried every
    other warning; the metric counts each."""
    logged = {"stage": stage, "reason": reason, "strategy": strategy}
    if exc is not None:
        logged["error"] = f"{type(exc).__name__}: {exc}"
    level = logging.WARNING if _fallback_warnings.due((strategy, stage)) else logging.INFO
    log.log(level, "rewrite fell back to the plain query", extra={"kgqr": logged})
    metrics.FALLBACKS.labels(strategy, stage).inc()
    return {"stage": stage, "reason": redact_addresses(reason)[:300], "strategy": strategy}


class Rewriter:
    def __init__(
        self,
        settings: Settings,
        llm: AsyncLlmClient,
        cache: RewriteCache,
        embedders: QueryEmbedders,
        meta_of: Callable[[str], Awaitable[KnowledgeBaseMeta | None]],
        graph: Graph | None = None,
        triples_reader: Search | None = None,
    ) -> None:
        """`triples_reader`: kgqr's account, which searches the KBs' triples for every
        caller (StrategyContext.triples_reader); None: each caller's own."""
        self.settings = settings
        self.llm = llm
        self.cache = cache
        self.embedders = embedders
        self.meta_of = meta_of
        self.graph = graph
        self.triples_reader = triples_reader
        self._running = 0  # rewrites being computed (admission: rewrite_max_concurrent)
        self._running_for: Counter[str] = Counter()  # ... by caller (their share)
        # Budgeted LLM rewrites still running after their search was answered, by cache key
        # (identical ones share one); referenced here so they are not collected mid-flight.
        self._background: dict[str, asyncio.Task[tuple[RewriteOutcome, bool]]] = {}
        # ... by whom: half the slots at most each caller kgqr tells apart, so that one
        # caller's new queries cannot keep every other's from being queued. Callers it
        # cannot tell apart share the whole, as they do KGQR_REWRITE_MAX_CONCURRENT.
        self._background_for: Counter[str] = Counter()
        if settings.rewrite.budget_ms is not None and settings.rewrite.cache_ttl_s <= 0:
            # A budgeted rewrite reaches later searches through the cache alone.
            log.warning(
                "KGQR_REWRITE_BUDGET_MS is set and the rewrite cache is off "
                "(KGQR_REWRITE_CACHE_TTL_S=%s): each budgeted search answers with %s and its "
                "LLM rewrite, finished in the background, serves no later search",
                settings.rewrite.cache_ttl_s,
                settings.rewrite.budget_strategy,
            )

    async def _meta_or_none(self, kb: str) -> KnowledgeBaseMeta | None:
        """`kb`'s meta; None while it cannot be read (the search then goes on with the
        default model, and a mismatch falls back at the engine)."""
        try:
            return await self.meta_of(kb)
        except Exception:
            return None

    @staticmethod
    def _side_vector_scores(
        caller: Search, reads: SideVectorReads | None
    ) -> SideVectorScores | None:
        """The vector side of an attached index that kgqr embedded, as the search reads it
        (search/service.py): the caller's candidates, vouched for by the caller's fetch."""
        if reads is None:
            return None

        async def scores(
            parsed: ParsedQuery, searched: SearchFields, vector: np.ndarray, size: int
        ) -> dict[str, float] | None:
            side = await reads.read(caller, parsed, searched, size)
            return side.scores(vector) if side is not None and side.ids else None

        return scores

    async def rewrite(
        self,
        *,
        index: str,
        kb: str,
        strategy: Strategy,
        query: str,
        params: dict[str, float],
        gateway: Search,
        caller: str,
        query_vector: Sequence[float] | None = None,
        side_vectors: SideVectorReads | None = None,
        own_reads: OwnReadsCheck | None = None,
        told_apart: bool = True,
        query_fields: tuple[str, ...] = (),
    ) -> RewriteOutcome:
        """`caller` is the identity OpenSearch resolved (engine/identities.py): a rewrite
        may quote documents only that caller can read, so it is cached per caller.
        `told_apart`: whether the caller sent credentials of its own; callers that did not
        are one to kgqr, and no share of the rewrites is kept from them for another.
        `query_vector`: a vector query's own vector (`query` then only names it).
        `side_vectors`: the search's reads of kgqr's vectors of an attached index.
        `own_reads`: how the caller's fetch shows kgqr's own documents: their `id` doc
        values as ids (StrategyContext.search_ids), the text their graph's facts came from
        (strategies/text_facts.py). `query_fields`: the fields the caller's query named,
        which an attached index that follows them searches for the plain hits too."""
        # What shapes a rewrite is what its strategy declared (it cannot read anything
        # else), resolved: changing any of it, or kgqr's code, never serves a stale one.
        # The vectors' model too: a re-embedded knowledge base never gets a cached query
        # vector of its old model.
        config = strategy.config(params, self.settings)
        meta = await self._meta_or_none(kb)
        config["embedder"] = self.embedders.model_for(meta)
        config["llm_sample"] = self.settings.llm.sample  # another draw is another rewrite
        # An attached index's field map shapes what its searches read; a vector query is
        # named by its vector's digest, which a text query could spell out.
        if meta is not None and meta.attached is not None:
            config["fields"] = meta.attached.model_dump(mode="json")
            if meta.attached.follow_query_fields and query_fields:
                config["query_fields"] = list(query_fields)
            else:
                query_fields = ()  # the map's own: one rewrite, whatever the query names
        if query_vector is not None:
            config["vector_query"] = True
        if strategy.uses_llm and meta is not None:
            # Its prompts name the KB's types and relations (HyDE's, AGR's read no graph,
            # so no graph version tells that an ingest added some).
            config["structure"] = meta.structure.model_dump(mode="json")
        if strategy.reads_graph and self.graph is not None:
            revision = await self.graph.revision(kb)
            config["graph_version"] = str(revision) if revision is not None else None
        # A caller not shown the text reads the graph without its facts: another rewrite,
        # and one made before their role narrowed is never theirs again.
        text_facts = True
        if strategy.reads_graph and own_reads is not None and (meta is None or not meta.attached):
            text_facts = (await own_reads()).text
            if not text_facts:
                config["text_facts"] = False
        if strategy.reads_plans:  # a new optimisation never serves old rewrites
            book = book_of(meta)  # None while kgqr-meta is unreadable: the agent falls back
            config["agent_plans"] = book.fingerprint() if book else None
        key = rewrite_key(caller, index, strategy.name, config, query)
        cached = await self.cache.get(key)
        stale = False
        if cached is not None:
            try:
                outcome = RewriteOutcome.from_cache(cached)
            except (KeyError, TypeError, ValueError):
                log.warning("a corrupt cached rewrite was ignored", extra={"kgqr": {"key": key}})
            else:
                shown = [FieldEvidence.stored(stored) for stored in outcome.field_evidence]
                if await self._still_readable(gateway, index, outcome.evidence, shown):
                    metrics.CACHE.labels("hit").inc()
                    return outcome
                stale = True
                log.info(
                    "a cached rewrite quotes documents the caller may no longer read",
                    extra={"kgqr": {"index": index, "strategy": strategy.name}},
                )
        # A stale entry (evidence no longer readable) is made afresh below, and replaced.
        metrics.CACHE.labels("stale" if stale else "miss").inc()

        budget_ms = self.settings.rewrite.budget_ms
        budgeted = budget_ms is not None and strategy.uses_llm
        # A budgeted rewrite keeps no search waiting: it may queue behind the others for an
        # LLM slot as long as the background timeout allows.
        timeout_s = (
            self.settings.rewrite.background_timeout_s
            if budgeted
            else self.settings.rewrite.timeout_s
            if strategy.uses_llm
            else self.settings.rewrite.llm_free_timeout_s
        ) + strategy.own_time_s(self.settings)

        async def compute() -> RewriteOutcome:
            chosen, refused = strategy, None
            # A budgeted rewrite in the background keeps no search waiting, and is bounded
            # apart (KGQR_REWRITE_BACKGROUND_MAX): it takes no share of the caller's, nor
            # of the proxy's (held there, one caller's filled what its share left).
            share = caller if told_apart and not budgeted else None
            if strategy.name != "base" and (full := self._full_for(share)) is not None:
                if strategy.uses_llm:
                    return self._unrewritten(strategy.name, query, params, "admission", full)
                # An LLM-free rewrite refused runs as base, which is never refused: the
                # search keeps base's hybrid ranking (a KB's default is often `graph`).
                chosen, refused = STRATEGIES["base"], full
            # `base` is not counted, as it is never refused: counted, sixteen base searches
            # waiting on a model's first load pushed every other caller's graph searches
            # down to base and refused their LLM rewrites.
            counted = int(chosen.name != "base" and not budgeted)
            self._running += counted
            if share is not None:
                self._running_for[share] += counted
            metrics.REWRITES_RUNNING.inc(counted)
            recorded = RecordingSearch(gateway, index)
            try:
                outcome = await self._compute(
                    index, kb, chosen, query, params, recorded, caller, timeout_s, query_vector,
                    self._side_vector_scores(recorded, side_vectors), own_reads, text_facts,
                    query_fields,
                )  # fmt: skip
            finally:
                self._running -= counted
                if share is not None:
                    self._running_for[share] -= counted
                    if not self._running_for[share]:
                        del self._running_for[share]
                metrics.REWRITES_RUNNING.dec(counted)
            if refused is not None and outcome.fallback is None:  # not cached, as a fallback
                outcome.fallback = record_fallback(strategy.name, "admission", refused)
            served = outcome.rewrite
            outcome.evidence = sorted(recorded.read | set(served.boost_ids) | set(served.sources))
            outcome.field_evidence = sorted(gate.as_stored() for gate in recorded.shown)
            if outcome.fallback is None:
                await self.cache.put(key, outcome.to_cache())
            return outcome

        if budget_ms is None or not budgeted:
            outcome, shared = await self.cache.coalesce(key, compute)
            return replace(outcome, cached=True) if shared else outcome
        task = self._background.get(key)
        owner = caller if told_apart else None
        if task is None and self._background_slot_for(owner):
            task = asyncio.create_task(self.cache.coalesce(key, compute))
            self._background[key] = task
            if owner is not None:
                self._background_for[owner] += 1
            task.add_done_callback(
                lambda done: self._background_done(key, strategy.name, done, owner)
            )
        if task is not None:
            finished, _ = await asyncio.wait({task}, timeout=budget_ms / 1000)
            if finished:
                metrics.BUDGETED.labels("full").inc()
                outcome, shared = task.result()
                return replace(outcome, cached=True) if shared else outcome
        # Over budget: the fast strategy answers now (its own rewrite, cached as usual).
        fast = STRATEGIES[self.settings.rewrite.budget_strategy]
        metrics.BUDGETED.labels("fast" if task is not None else "fast_not_queued").inc()
        served = await self.rewrite(
            index=index,
            kb=kb,
            strategy=fast,
            query=query,
            params={k: v for k, v in params.items() if k in fast.declared()},
            gateway=gateway,
            caller=caller,
            query_vector=query_vector,
            side_vectors=side_vectors,
            own_reads=own_reads,
            told_apart=told_apart,
            query_fields=query_fields,
        )
        pending = strategy.name if task is not None else None
        budget: Budget = {"served": fast.name, "pending": pending, "budget_ms": budget_ms}
        return replace(served, budget=budget)

    @staticmethod
    async def _still_readable(
        gateway: Search, index: str, evidence: list[str], shown: list[FieldEvidence]
    ) -> bool:
        """A rewrite whose evidence cannot be checked now (the engine answers an error) is
        not served: it is made afresh, with the caller's own searches."""
        try:
            return await still_readable(gateway, index, evidence, shown)
        except Exception as exc:
            log.info("a cached rewrite's evidence could not be checked: made afresh",
                     extra={"kgqr": {"error": f"{type(exc).__name__}: {exc}"[:300]}})  # fmt: skip
            return False

    def _background_slot_for(self, owner: str | None) -> bool:
        most = self.settings.rewrite.background_max
        if len(self._background) >= most:
            return False
        return owner is None or self._background_for[owner] < max(1, most // 2)

    def _background_done(
        self,
        key: str,
        strategy: str,
        task: asyncio.Task[tuple[RewriteOutcome, bool]],
        owner: str | None = None,
    ) -> None:
        """A budgeted rewrite finished: the next identical search is served from the cache
        (a rewrite that fell back is not cached, and the next search tries again)."""
        if self._background.pop(key, None) is not None and owner is not None:
            self._background_for[owner] -= 1
            if not self._background_for[owner]:
                del self._background_for[owner]
        if task.cancelled():
            return
        error = task.exception()
        outcome = None if error else task.result()[0]
        result = "cached" if outcome is not None and outcome.fallback is None else "fell_back"
        metrics.BACKGROUND_REWRITES.labels(result).inc()
        told: dict[str, Any] = {"strategy": strategy, "result": result}
        if error is not None:  # retrieved here, so asyncio would never tell it
            told["error"] = f"{type(error).__name__}: {error}"[:300]
        elif outcome is not None and outcome.fallback is not None:
            told["fallback"] = outcome.fallback
        (log.warning if error is not None else log.info)(
            "a budgeted rewrite finished in the background", extra={"kgqr": told}
        )

    async def _compute(
        self,
        index: str,
        kb: str,
        strategy: Strategy,
        query: str,
        params: dict[str, float],
        gateway: Search,
        caller: str,
        timeout_s: float | None = None,
        given_vector: Sequence[float] | None = None,
        side_vectors: SideVectorScores | None = None,
        own_reads: OwnReadsCheck | None = None,
        text_facts: bool = True,
        query_fields: tuple[str, ...] = (),
    ) -> RewriteOutcome:
        started = time.perf_counter()
        timeout_s = timeout_s or self.settings.rewrite.timeout_s
        timer = StageTimer()
        strategy_name = strategy.name
        alpha = param_value(ALPHA, params, self.settings)
        fallback = None
        usage = LlmUsage()
        ctx: StrategyContext | None = None
        embed: Embed | None = None
        try:
            with timer.stage("structure"):
                try:
                    meta = await self.meta_of(kb)
                except MetaUnreadable as exc:
                    # Its model and field map unknown, a hybrid search would guess them.
                    return self._unrewritten(strategy_name, query, params, "structure", str(exc))
            structure = meta.structure if meta is not None else DocumentStructure()
            try:
                with timer.stage("embedder"):
                    vectorless = meta is not None and not meta.fields().has_vectors
                    model = self.embedders.model_for(meta)
                    embed = (
                        no_vectors
                        if vectorless
                        else await self.embedders.for_model_within(model, timeout_s)
                    )
            except (EmbedderRefused, EmbedderLoading) as exc:
                # Its vectors and the query vectors would live in different spaces: a k-NN
                # search between them would answer, and mean nothing.
                reason = f"knowledge base {kb!r}: {exc}"
                return self._unrewritten(strategy_name, query, params, "embedder", reason)
            ctx = StrategyContext(
                self.settings,
                index,
                kb,
                structure,
                CallerLlm(self.llm, caller),
                gateway,
                embed,
                timer,
                params,
                graph=self.graph,
                declared=strategy.declared(),
                usage=usage,
                meta=meta,
                fields=meta.attached if meta is not None else None,
                vector_query=given_vector is not None,
                side_vectors=side_vectors,
                own_reads=own_reads,
                text_facts=text_facts,
                query_fields=query_fields,
                triples_reader=self.triples_reader,
            )
            if given_vector is not None:  # the caller's client embedded it: no embedding
                ctx.query_vectors[query] = np.asarray(given_vector, dtype=np.float32)
            # What the budget has left after the structure and the model's load.
            left = max(timeout_s - (time.perf_counter() - started), 0.0)
            rewrite = await asyncio.wait_for(strategy.rewrite(query, ctx), timeout=left)
            if not text_facts:  # said, not silent: it ranks without what the text says
                rewrite.details["text_facts"] = TEXT_NOT_SHOWN
        except Exception as exc:  # any failure of a strategy degrades to the plain query
            stage = timer.current or "rewrite"
            fallback = record_fallback(strategy_name, stage, failure_reason(exc), exc)
            rewrite = Rewrite(strategy="base", query=query)
        timer.settle()
        known = ctx.query_vectors.get(query) if ctx is not None else None
        if known is None and given_vector is not None:  # the strategy failed early
            known = np.asarray(given_vector, dtype=np.float32)
        remaining = timeout_s - (time.perf_counter() - started)
        # The query's own vector is what any hybrid search needs, a fallback's too: it gets
        # at least the LLM-free budget, where a strategy spent all of its own.
        own_vector_s = max(remaining, self.settings.rewrite.llm_free_timeout_s)
        try:
            embed = embed or await self.embedders.default(own_vector_s)
            with timer.stage("embed"):
                # The query's own vector (once: a strategy that embedded it already left it
                # in the context), behind other searches' in the encoder's queue.
                query_vector = (
                    known
                    if known is not None
                    else (await asyncio.wait_for(embed([query]), own_vector_s))[0]
                )
        except Exception as exc:  # a model that does not load or encode: no hybrid search
            reason = f"the query could not be embedded: {failure_reason(exc)}"
            return self._unrewritten(strategy_name, query, params, "embed", reason)
        try:
            with timer.stage("embed"):
                # Context texts (PRF hits, generated documents), within the budget. Not for
                # a vector query: its matches are its own vector's k nearest, and a fused
                # vector's are other documents under the same total.
                context = list(rewrite.context_texts) if given_vector is None else []
                if rewrite.context_texts and given_vector is not None:
                    rewrite.details["context"] = VECTOR_KEPT
                context_vectors = (
                    await asyncio.wait_for(embed(context), max(remaining, 0.0))
                    if context
                    else np.zeros((0, len(query_vector)), dtype=np.float32)
                )
        except Exception as exc:
            fallback = fallback or record_fallback(strategy_name, "embed", failure_reason(exc), exc)
            rewrite = Rewrite(strategy="base", query=query)
            context_vectors = np.zeros((0, len(query_vector)), dtype=np.float32)
        vector = fuse(query_vector, mean_vector(context_vectors), alpha)
        for stage, ms in timer.stages_ms.items():
            metrics.STAGE_SECONDS.labels(strategy_name, stage).observe(ms / 1000)
        metrics.REWRITE_SECONDS.labels(strategy_name).observe(time.perf_counter() - started)
        return RewriteOutcome(
            rewrite,
            [float(x) for x in vector],
            alpha,
            dict(timer.stages_ms),
            fallback,
            llm=usage,
            plain_vector=[float(x) for x in query_vector],
        )

    def _full_for(self, caller: str | None) -> str | None:
        """Why no rewrite is admitted for `caller` now, if none is: the proxy's rewrites
        are all running, or the caller's share of them is (None: no share is kept). An LLM
        rewrite refused runs the plain query at once: under load even embedding the query
        (CPU-bound, ~10 ms) would queue every search."""
        limit = self.settings.rewrite.max_concurrent
        if self._running >= limit:
            return f"{limit} rewrites were already running (KGQR_REWRITE_MAX_CONCURRENT)"
        share = self.settings.rewrite.caller_share
        if caller is not None and self._running_for[caller] >= share:
            return (
                f"{share} rewrites of this caller were already running, its share of "
                f"{limit} (KGQR_REWRITE_MAX_CONCURRENT_PER_CALLER)"
            )
        return None

    def _unrewritten(
        self, strategy: str, query: str, params: dict[str, float], stage: str, reason: str
    ) -> RewriteOutcome:
        """No vector, so the caller's own search runs as sent."""
        return RewriteOutcome(
            Rewrite(strategy="base", query=query),
            None,
            param_value(ALPHA, params, self.settings),
            {},
            record_fallback(strategy, stage, reason),
        )
