"""One rewritten search, independent of HTTP: rewrite, search hybrid with the caller's
credentials, keep the original query's totals and facets, fall back to the plain query when
the rewritten one fails, log it. The proxy's `_search`, its `_msearch` items and the tune
page all run searches through `run_plan`."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx
import numpy as np

from query_rewriter import metrics
from query_rewriter.engine.caller import Caller
from query_rewriter.engine.forwarding import json_answer
from query_rewriter.engine.gateway import OpenSearchGateway
from query_rewriter.engine.hybrid_query import hybrid_body, search_params, weighted
from query_rewriter.engine.original_facets import (
    facet_body,
    with_original_facets,
    without_aggregations,
)
from query_rewriter.search.client_fusion import client_side_hybrid
from query_rewriter.search.explain import Explain, Fallback
from query_rewriter.search.plain_fusion import depth_body, fuse_protecting_top
from query_rewriter.search.plan import URL_PAGING, SearchPlan, strip_kgqr
from query_rewriter.search.query_embedders import EmbedderRefused
from query_rewriter.search.query_log import query_log_entry
from query_rewriter.search.rewriter import RewriteOutcome, record_fallback
from query_rewriter.search.state import ProxyState
from query_rewriter.strategies.params import (
    FUSE_PLAIN,
    HYBRID_BM25,
    KEEP_TOP,
    KNN_K,
    param_value,
)

log = logging.getLogger("kgqr.proxy")
HYBRID_NOT_TOP_LEVEL = "hybrid query must be a top level query"
# On a rewritten search that answered with the plain query instead (explain: `fallback`).
FALLBACK_HEADER = "x-kgqr-fallback"


def fallback_header(fallback: Fallback) -> str:
    """`stage: reason` on one printable ASCII line, so a client that asked for no explain
    still learns that this answer is the plain query's."""
    text = f"{fallback.get('stage')}: {fallback.get('reason', '')}"
    return "".join(c if " " <= c <= "~" else " " for c in text)[:200]


def with_explain(upstream: httpx.Response, explain: Explain | None) -> dict[str, Any]:
    """OpenSearch's JSON answer, with the explain when one was asked for."""
    try:
        result = upstream.json()
    except ValueError:
        result = {"error": upstream.text}
    if isinstance(result, dict) and explain is not None:
        result["kgqr"] = explain
    return dict(result)


async def run_plan(
    state: ProxyState, plan: SearchPlan, query_params: dict[str, str], headers: dict[str, str]
) -> tuple[httpx.Response, Explain]:
    """Rewrite, search hybrid; if the hybrid search itself fails, search the original.
    Every request here carries the caller's credentials, never kgqr's."""
    began = time.perf_counter()
    caller = Caller.from_headers(headers, state.settings)
    headers = {**headers, **caller.headers}
    original = {k: v for k, v in query_params.items() if not k.startswith("kgqr.")}
    identity = await state.identities.identity(caller)
    if identity is None or await state.identities.search_refused(caller, plan.index):
        # OpenSearch refuses these credentials, or this search: its own answer, no rewrite
        refused = await _original_search(state, plan, original, headers)
        metrics.PASSED_THROUGH.labels("refused").inc()
        log.info(
            "no rewrite: OpenSearch refuses this search",
            extra={"kgqr": {"index": plan.index, "status": refused.status_code}},
        )
        return refused, {"strategy": plan.strategy, "refused": refused.status_code}
    outcome: RewriteOutcome = await state.rewriter.rewrite(
        index=plan.index,
        kb=plan.kb,
        strategy=plan.strategy,
        query=plan.parsed.text,
        params=plan.params,
        gateway=OpenSearchGateway(state.http, caller.headers),
        caller=identity,
    )
    started = time.perf_counter()
    if outcome.vector is None:  # refused admission under load: the caller's search, at once
        upstream, body, fusion = await _original_search(state, plan, original, headers), None, None
    else:
        try:
            upstream, body, fusion = await _rewritten_search(
                state, plan, outcome, query_params, original, headers
            )
        except httpx.HTTPError:
            raise  # OpenSearch unreachable: the plain query would not reach it either
        except Exception as exc:
            # A kgqr bug costs the rewrite, as a failing strategy does, not the search.
            log.exception("building the rewritten search failed")
            reason = f"kgqr could not build the rewritten search: {type(exc).__name__}: {exc}"
            outcome.fallback = record_fallback(plan.strategy, "search", reason)
            upstream = await _original_search(state, plan, original, headers)
            body, fusion = None, None
    outcome.stages_ms["search"] = round((time.perf_counter() - started) * 1000, 2)
    explain = outcome.explain(body or plan.body)
    explain["fusion"] = fusion
    if plan.parsed.demands:
        explain["kept_as_filter"] = plan.parsed.demands
    if plan.warnings:
        explain["warnings"] = list(plan.warnings)
        log.warning("deprecated kgqr parameters", extra={"kgqr": {"warnings": plan.warnings}})
    if state.query_log is not None:
        state.query_log.record(
            query_log_entry(
                kb=plan.kb,
                index=plan.index,
                strategy=plan.strategy,
                explain=explain,
                upstream=upstream,
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
    query_params: dict[str, str],
    headers: dict[str, str],
    endpoint: str = "_search",
) -> httpx.Response:
    """A search kgqr does not rewrite but must read the answer of (to add an explain), as
    the caller: their credentials, their body and parameters less kgqr's own."""
    caller = Caller.from_headers(headers, state.settings)
    return await state.http.post(
        f"/{index}/{endpoint}",
        json=strip_kgqr(body),
        params={k: v for k, v in query_params.items() if not k.startswith("kgqr.")},
        headers={**headers, **caller.headers},
    )


async def _original_search(
    state: ProxyState, plan: SearchPlan, original: dict[str, str], headers: dict[str, str]
) -> httpx.Response:
    return await state.http.post(
        f"/{plan.index}/_search", json=plan.body, params=original, headers=headers
    )


async def _rewritten_search(
    state: ProxyState,
    plan: SearchPlan,
    outcome: RewriteOutcome,
    query_params: dict[str, str],
    original: dict[str, str],
    headers: dict[str, str],
) -> tuple[httpx.Response, dict[str, Any], str | None]:
    """The hybrid search with the original query's totals and facets; the original search
    (outcome.fallback says why) if either fails. Returns the answer, the body it answers
    and how the hybrid was fused."""
    k = int(param_value(KNN_K, plan.params, state.settings))
    fusion_mode = int(param_value(FUSE_PLAIN, plan.params, state.settings))
    fuse = fusion_mode >= 1
    body = hybrid_body(
        depth_body(plan.body) if fuse else plan.body,
        plan.parsed,
        outcome.rewrite.expanded_text,
        np.asarray(outcome.vector, dtype=np.float32),
        k,
        boosts=outcome.rewrite.boost_ids,
    )
    body = _weighted(body, state, plan, outcome.rewrite.boost_share)
    (upstream, fusion), facets, (base, base_answer) = await asyncio.gather(
        hybrid_search(state, plan.index, body, query_params, headers),
        state.http.post(
            f"/{plan.index}/_search",
            json=facet_body(plan.body),
            params={k: v for k, v in original.items() if k not in URL_PAGING},
            headers=headers,
        ),
        _base_ranking(state, plan, k, query_params, headers) if fuse else _no_hits(),
    )
    failed = upstream if upstream.status_code >= 400 else facets
    if failed.status_code < 400:
        merged = with_original_facets(upstream.json(), facets.json())
        if fuse:
            keep = int(param_value(KEEP_TOP, plan.params, state.settings))
            start, size = int(plan.body.get("from", 0)), int(plan.body.get("size", 10))
            rrf = fusion_mode == 1
            hits = fuse_protecting_top(base, merged["hits"]["hits"], keep, start, size, rrf)
            merged["hits"] = {**merged["hits"], "hits": hits,
                              "max_score": hits[0]["_score"] if hits else None}  # fmt: skip
            how = "RRF" if rrf else "the rest in the strategy's order"
            fusion = f"{fusion}; fused with base ({how}, its top {keep} kept)"
        return json_answer(merged, upstream, facets, *base_answer), body, fusion
    if upstream.status_code in (401, 403, 404):
        return upstream, body, fusion  # the caller's own refusal, as OpenSearch gave it
    # A re-embed may have moved the KB to another model (its vectors no longer fit the
    # query's): the next search reads its meta afresh instead of after the cache's minute.
    state.kb_metas.pop(plan.kb, None)
    what = "" if failed is upstream else " to the original query's totals"
    reason = f"OpenSearch answered {failed.status_code}{what}: {failed.text}"
    outcome.fallback = record_fallback(plan.strategy, "search", reason)
    return await _original_search(state, plan, original, headers), plan.body, fusion


async def _base_ranking(
    state: ProxyState,
    plan: SearchPlan,
    k: int,
    query_params: dict[str, str],
    headers: dict[str, str],
) -> tuple[list[dict[str, Any]], list[httpx.Response]]:
    """The `base` ranking (the hybrid search of the query alone) down to the end of the
    page: what fusion protects, and the engine's answer it came in (whose warnings are
    the caller's too). No hits if that search fails: the rewrite's ranking stands."""
    try:
        embed = await state.rewriter.query_embed(plan.kb)
    except EmbedderRefused:
        return [], []
    vector = (await embed([plan.parsed.text]))[0]
    body = hybrid_body(depth_body(plan.body), plan.parsed, plan.parsed.text, np.asarray(vector), k)
    body = _weighted(body, state, plan)
    response, _ = await hybrid_search(state, plan.index, body, query_params, headers)
    hits = list(response.json()["hits"]["hits"]) if response.status_code == 200 else []
    return hits, [response]


def _weighted(
    body: dict[str, Any], state: ProxyState, plan: SearchPlan, boost_share: float | None = None
) -> dict[str, Any]:
    bm25 = plan.params.get(HYBRID_BM25.name)
    return weighted(body, bm25, state.settings.hybrid_boost_weights, boost_share)


async def _no_hits() -> tuple[list[dict[str, Any]], list[httpx.Response]]:
    return [], []


async def hybrid_search(
    state: ProxyState,
    index: str,
    body: dict[str, Any],
    query_params: dict[str, str],
    headers: dict[str, str],
) -> tuple[httpx.Response, str]:
    """The hybrid body (its aggregations dropped: the original query's answer them)
    through the engine's pipeline, else fused in kgqr; says which.

    A caller under document-level security cannot run a `hybrid` query on OpenSearch 2.19:
    the security plugin wraps the query in its filter, and neural-search refuses a hybrid
    query that is not top-level (neural-search issue 1303). For such a caller the same
    sub-queries are fused in kgqr, so the rewrite still applies."""
    params = search_params(query_params, body)
    body = without_aggregations(body)
    if not state.neural_search:
        return await client_side_hybrid(state.http, index, body, params, headers), "client"
    upstream = await state.http.post(f"/{index}/_search", json=body, params=params, headers=headers)
    if upstream.status_code == 400 and HYBRID_NOT_TOP_LEVEL in upstream.text:
        fused = await client_side_hybrid(state.http, index, body, params, headers)
        return fused, "client (the engine refused a hybrid query under document-level security)"
    return upstream, "pipeline"
