"""One rewritten search, independent of HTTP: rewrite, search hybrid with the caller's
credentials, keep the original query's totals and facets, fall back to the plain query when
the rewritten one fails, log it. The proxy's `_search`, its `_msearch` items and the tune
page all run searches through `run_plan`."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from plugin.schema import META_INDEX
from query_rewriter import metrics
from query_rewriter.engine.caller import Caller
from query_rewriter.engine.errors import failure_reason
from query_rewriter.engine.forwarding import answer_content, bytes_to_read, json_answer
from query_rewriter.engine.gateway import EngineSession
from query_rewriter.engine.hybrid_query import (
    OWN_FIELDS,
    HybridWeights,
    SearchFields,
    graph_adds,
    hybrid_body,
    rewritten_search,
)
from query_rewriter.engine.off_loop import off_the_loop_if_large
from query_rewriter.engine.original_facets import facet_body, with_original_facets
from query_rewriter.engine.shard_health import with_worst_health
from query_rewriter.search.explain import Explain, Fallback
from query_rewriter.search.plain_fusion import fuse_protecting_top
from query_rewriter.search.plan import PassThrough, SearchPlan, strip_kgqr
from query_rewriter.search.query_log import HitCount, query_log_entry
from query_rewriter.search.rewriter import RewriteOutcome, record_fallback
from query_rewriter.search.side_vectors import SideVectorReads
from query_rewriter.search.state import ProxyState
from query_rewriter.strategies.params import FUSE_PLAIN, KEEP_TOP, KNN_K, param_value

log = logging.getLogger("kgqr.proxy")
# On a rewritten search that answered with the plain query instead (explain: `fallback`).
FALLBACK_HEADER = "x-kgqr-fallback"


def fallback_header(fallback: Fallback) -> str:
    """`stage: reason` on one printable ASCII line, so a client that asked for no explain
    still learns that this answer is the plain query's."""
    text = f"{fallback.get('stage')}: {fallback.get('reason', '')}"
    return "".join(c if " " <= c <= "~" else " " for c in text)[:200]


# What an explain quotes of kgqr-meta, which kgqr reads with its own account: a KB's own
# default's who, when and why, and the agent's optimised plan. The strategy and parameters
# stay (they are what ran); the rest is shown to callers the engine lets read kgqr-meta.
META_OF_DEFAULT = ("reason", "set_by", "set_at")
META_OF_AGENT = ("category", "plans_version", "plan")
WITHHELD = "kept in kgqr-meta, which this caller may not read"


async def _withhold_meta_unless_readable(
    state: ProxyState, caller: Caller, plan: SearchPlan, explain: Explain
) -> None:
    default = explain.get("default") if plan.kb_default is not None else None
    details = explain.get("details") if explain.get("strategy") == "agent" else None
    quoted = isinstance(default, dict) or isinstance(details, dict)
    if not quoted or await state.identities.may_search(caller, META_INDEX):
        return
    if isinstance(default, dict):
        explain["default"] = _withheld(default, META_OF_DEFAULT)
    if isinstance(details, dict):  # a copy: the details are the (cached) rewrite's own
        explain["details"] = _withheld(details, META_OF_AGENT)


def _withheld(shown: dict[str, Any], of_meta: tuple[str, ...]) -> dict[str, Any]:
    kept = {key: value for key, value in shown.items() if key not in of_meta}
    return {**kept, "withheld": f"{', '.join(of_meta)}: {WITHHELD}"}


async def run_plan(
    state: ProxyState, plan: SearchPlan, headers: dict[str, str]
) -> tuple[httpx.Response, Explain]:
    """Rewrite, search hybrid; if the hybrid search itself fails, search the original.
    Every request here carries the caller's credentials, never kgqr's."""
    began = time.perf_counter()
    caller = Caller.from_headers(headers, state.settings)
    session = state.engine.as_caller(caller, headers)
    identity = await state.identities.identity(caller)
    outcome: RewriteOutcome | None = None
    searched = Searched(None, None, None)  # the caller's own search, unless rewritten
    # Unless OpenSearch refuses these credentials, or this search: then its own answer.
    if identity is not None and not await state.identities.search_refused(caller, plan.index):
        side_vectors = SideVectorReads.of(
            state.engine.as_kgqr(), plan.index, plan.kb, plan.fields,
            state.settings.rewrite.side_vector_depth,
        )  # fmt: skip
        outcome = await state.rewriter.rewrite(
            index=plan.index,
            kb=plan.kb,
            strategy=plan.strategy,
            query=plan.parsed.text,
            params=plan.params,
            gateway=state.engine.as_caller(caller),
            caller=identity,
            query_vector=plan.parsed.vector,
            side_vectors=side_vectors,
            own_reads=lambda: state.identities.own_documents_as_read(caller, plan.index),
            query_fields=plan.parsed.fields,
            told_apart=not caller.anonymous,
        )
        started = time.perf_counter()
        if outcome.vector is not None:  # else refused admission: the caller's own search
            try:
                searched = await _rewritten_search(state, session, plan, outcome, side_vectors)
            except httpx.TransportError:
                raise  # OpenSearch unreachable: the plain query would not reach it either
            except Exception as exc:
                # A kgqr bug costs the rewrite, as a failing strategy does, not the search.
                log.exception("building the rewritten search failed")
                why = f"kgqr could not build the rewritten search: {failure_reason(exc)}"
                searched = Searched(None, None, None, why)
        if searched.failure is not None:
            outcome.fallback = record_fallback(plan.strategy.name, "search", searched.failure)
    upstream = searched.answer or await session.search_answer(
        plan.index, plan.body, plan.sent_params
    )
    if outcome is None:
        metrics.PASSED_THROUGH.labels("refused").inc()
        log.info(
            "no rewrite: OpenSearch refuses this search",
            extra={"kgqr": {"index": plan.index, "status": upstream.status_code}},
        )
        # Nothing of kgqr-meta: which default a KB serves is not the refused caller's to know.
        return upstream, {"refused": upstream.status_code}
    outcome.stages_ms["search"] = round((time.perf_counter() - started) * 1000, 2)
    explain = outcome.explain(searched.body or plan.body)
    explain["fusion"] = searched.fusion
    if searched.within:
        explain["hits_from"] = searched.within
        explain["signals"] = list(searched.signals)
    if searched.side_vectors is not None:
        explain["side_vectors"] = searched.side_vectors
    if (kb_default := plan.default_explained()) is not None:
        explain["default"] = kb_default
    if plan.explain:
        await _withhold_meta_unless_readable(state, caller, plan, explain)
    if plan.parsed.demands:
        explain["kept_as_filter"] = plan.parsed.demands
    if plan.warnings:
        explain["warnings"] = list(plan.warnings)  # the caller's to read (and logged below)
    if state.query_log is not None:
        state.query_log.record(
            query_log_entry(
                kb=plan.kb,
                index=plan.index,
                strategy=plan.strategy.name,
                explain=explain,
                status=upstream.status_code,
                counted=await off_the_loop_if_large(
                    bytes_to_read(upstream), lambda: HitCount.of_response(upstream)
                ),
                total_ms=(time.perf_counter() - began) * 1000,
            )
        )
    if log.isEnabledFor(logging.INFO):
        log.info(
            "rewrite", extra={"kgqr": {k: v for k, v in explain.items() if k != "final_query"}}
        )
    return upstream, explain


async def passed_through_search(
    state: ProxyState,
    index: str,
    body: dict[str, Any],
    plan: PassThrough,
    headers: dict[str, str],
    endpoint: str = "_search",
) -> httpx.Response:
    """A search kgqr does not rewrite but must read the answer of (to add an explain), as
    the caller: their credentials, their body and parameters less kgqr's own."""
    return await state.engine.for_request(headers).send(
        "POST", f"/{index}/{endpoint}", json=strip_kgqr(body), params=plan.sent_params
    )


@dataclass(frozen=True)
class Searched:
    """What the rewritten search gave: the answer to send (None: send the caller's own
    search instead, `failure` says why), the body it answers, and how it was fused."""

    answer: httpx.Response | None
    body: dict[str, Any] | None
    fusion: str | None
    failure: str | None = None
    within: str | None = None  # what the hits (and hits.total) are drawn from
    signals: tuple[str, ...] = ()  # what ranked them: bm25, knn (a vector field), graph
    side_vectors: dict[str, Any] | None = None  # kgqr's vectors used, where it keeps them


async def _rewritten_search(
    state: ProxyState,
    session: EngineSession,
    plan: SearchPlan,
    outcome: RewriteOutcome,
    side_vectors: SideVectorReads | None,
) -> Searched:
    """The hybrid search with the original query's totals and facets, fused with the
    plain query's ranking where `fusion.plain` asks; no answer (and why) if either fails.
    `side_vectors`: kgqr's vectors of an attached index, as this search reads them."""
    k = int(param_value(KNN_K, plan.params, state.settings))
    fusion_mode = int(param_value(FUSE_PLAIN, plan.params, state.settings))
    fuse = fusion_mode >= 1 and outcome.plain_vector is not None
    boost_weights = state.settings.rewrite.hybrid_boost_weights
    fields = SearchFields.of(plan.fields, plan.parsed.fields) if plan.fields else OWN_FIELDS
    weighed = HybridWeights(plan.bm25, boost_weights, outcome.rewrite.boost_share)
    # The documents the graph adds to the caller's matches, which the total then counts.
    added = outcome.rewrite.graph_linked() if graph_adds(plan.body, plan.parsed, weighed) else set()
    side, scored = None, False
    # (No query vector: the proxy has not yet read the KB's new meta; state.meta_of.)
    if side_vectors is not None and outcome.vector:
        end = int(plan.body.get("from", 0)) + int(plan.body.get("size", 10))
        side = await side_vectors.read(session, plan.parsed, fields, end)
        scored = side is not None and bool(side.ids)  # else no vector side at all
    body = hybrid_body(
        plan.body,
        plan.parsed,
        outcome.rewrite.expanded_text,
        np.asarray(outcome.vector, dtype=np.float32),
        k,
        weighed,
        boosts=outcome.rewrite.boost_ids,
        deep=fuse,
        fields=fields,
        added=added,
        vector_scores=side.scores(np.asarray(outcome.vector, np.float32))
        if side and scored
        else None,
    )
    plain = None
    if fuse:  # `base`'s ranking (the query alone) down to the end of the page
        vector = np.asarray(outcome.plain_vector, dtype=np.float32)
        weights = HybridWeights(plan.bm25, boost_weights)
        plain = hybrid_body(
            plan.body, plan.parsed, plan.parsed.text, vector, k, weights, deep=True,
            fields=fields, vector_scores=side.scores(vector) if side and scored else None,
        )  # fmt: skip
    answers = await rewritten_search(
        session, plan.index, body, plain, facet_body(plan.body, plan.parsed, added),
        plan.sent_params, state.neural_search,
    )  # fmt: skip
    upstream, facets, fusion = answers.ranked, answers.facets, answers.fusion
    failed = upstream if upstream.status_code >= 400 else facets
    if failed.status_code < 400:
        plain_answers = [answers.plain] if answers.plain is not None else []
        keep = int(param_value(KEEP_TOP, plan.params, state.settings))

        def merged_answer() -> httpx.Response:
            """The hits, the caller's facets and (fused) base's ranking, read and written
            as one answer: as large as the page asked for, on a worker thread if large."""
            merged = with_original_facets(answer_content(upstream), answer_content(facets))
            if fuse:
                # No plain hits if that search failed: the rewrite's ranking stands.
                shown = [answer_content(a) for a in plain_answers if a.status_code == 200]
                base = [hit for plain_answer in shown for hit in plain_answer["hits"]["hits"]]
                merged = with_worst_health(merged, *shown)  # its hits are shown too
                start, size = int(plan.body.get("from", 0)), int(plan.body.get("size", 10))
                hits = fuse_protecting_top(
                    base, merged["hits"]["hits"], keep, start, size, fusion_mode == 1
                )
                merged["hits"] = {**merged["hits"], "hits": hits,
                                  "max_score": hits[0]["_score"] if hits else None}  # fmt: skip
            return json_answer(merged, upstream, facets, *plain_answers)

        read = sum(len(a.content) for a in (upstream, facets, *plain_answers))
        answer = await off_the_loop_if_large(read, merged_answer)
        if fuse:
            how = "RRF" if fusion_mode == 1 else "the rest in the strategy's order"
            fusion = f"{fusion}; fused with base ({how}, its top {keep} kept)"
        within = "the query's matches" + (
            " and the documents the graph links to it" if added else ""
        )
        sub_queries = len(body["query"]["hybrid"]["queries"])
        sides = [name for name, used in (("bm25", plan.parsed.vector is None),
                                         ("knn", bool(fields.vector) or scored))
                 if used]  # fmt: skip
        signals = (*sides, *(["graph"] if sub_queries > len(sides) else []))
        side_explained = side.explained() if side is not None else None
        return Searched(answer, body, fusion, within=within, signals=signals,
                        side_vectors=side_explained)  # fmt: skip
    if upstream.status_code in (401, 403, 404):
        return Searched(upstream, body, fusion)  # the caller's own refusal, as the engine gave it
    # A re-embed may have moved the KB to another model (its vectors no longer fit the
    # query's): the next search reads its meta afresh instead of after the cache's minute.
    state.kb_metas.pop(plan.kb, None)
    what = "" if failed is upstream else " to the original query's totals"
    reason = f"OpenSearch answered {failed.status_code}{what}: {failed.text[:1000]}"
    return Searched(None, plan.body, fusion, reason)
