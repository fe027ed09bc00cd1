"""The kgqr proxy: OpenSearch's REST API, with `_search` / `_msearch` on kgqr-managed
indices rewritten and sent as hybrid searches; every other request passes through."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import numpy as np
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from plugin import connections, kb_meta
from plugin.embedder import get_embedder
from plugin.kb_meta import DocumentStructure
from plugin.llm import AsyncLlmClient
from plugin.schema import META_INDEX, hybrid_pipelines, proxy_index_templates
from plugin.settings import Settings, get_settings
from query_rewriter import metrics
from query_rewriter.caller import Caller, IdentityResolver
from query_rewriter.client_fusion import client_side_hybrid
from query_rewriter.errors import (
    RewriteRequestError,
    error_response,
    redact_addresses,
    upstream_unreachable,
)
from query_rewriter.forwarding import Upstream, request_headers, to_response
from query_rewriter.front_status import read_fronts, render_fronts, status_folder
from query_rewriter.hybrid_query import hybrid_body, search_params
from query_rewriter.msearch_header import check_header
from query_rewriter.opensearch_gateway import OpenSearchGateway, opensearch_http_client
from query_rewriter.query_log import QueryLog, query_log_entry
from query_rewriter.rewrite_cache import RewriteCache, code_version
from query_rewriter.rewriter import RewriteOutcome, Rewriter
from query_rewriter.search_request import SearchPlan, plan_search, strip_kgqr
from query_rewriter.tuning.routes import tuning_routes

log = logging.getLogger("kgqr.proxy")
SEARCH_PATH = re.compile(r"^/([^/_][^/]*)/_search/?$")
MSEARCH_PATH = re.compile(r"^/(?:([^/_][^/]*)/)?_msearch/?$")
STRUCTURE_TTL_S = 60.0
HYBRID_NOT_TOP_LEVEL = "hybrid query must be a top level query"


@dataclass
class ProxyState:
    """`http` carries no credentials (callers' requests send their own); `service_http` is
    kgqr's own account, for kgqr's bookkeeping indices and definitions only."""

    settings: Settings
    http: httpx.AsyncClient
    service_http: httpx.AsyncClient
    upstream: Upstream
    redis: Any
    rewriter: Rewriter
    identities: IdentityResolver
    query_log: QueryLog | None = None
    neural_search: bool = True
    structures: dict[str, tuple[float, DocumentStructure]] = field(default_factory=dict)


def create_app(settings: Settings | None = None) -> Starlette:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        import redis.asyncio as aioredis

        http = opensearch_http_client(settings)
        service_http = opensearch_http_client(settings, service_account=True)
        redis = aioredis.Redis.from_url(
            settings.cache_redis_url,
            socket_timeout=settings.redis_timeout_s,
            socket_connect_timeout=settings.redis_timeout_s,
        )
        graph = connections.async_neo4j_driver(settings)
        embedder = await anyio.to_thread.run_sync(get_embedder, settings.embedder_model)
        await anyio.to_thread.run_sync(code_version)  # reads kgqr's files: not on the loop

        async def embed(texts: list[str]) -> np.ndarray:
            return await anyio.to_thread.run_sync(embedder.encode, texts)

        llm = AsyncLlmClient(settings, redis)
        state = ProxyState(
            settings,
            http,
            service_http,
            Upstream(settings),
            redis,
            Rewriter(
                settings,
                llm,
                RewriteCache(
                    redis, settings.rewrite_cache_ttl_s, settings.rewrite_cache_max_entry_bytes
                ),
                embed,
                lambda kb: structure_of(state, kb),
                graph,
            ),
            IdentityResolver(http),
            query_log=QueryLog(service_http) if settings.query_log_enabled else None,
        )
        fusion = settings.hybrid_fusion
        state.neural_search = fusion == "pipeline" or (
            fusion == "auto" and await _has_neural_search(service_http)
        )
        await _ensure_definitions(service_http, settings, pipelines=state.neural_search)
        if state.query_log is not None:
            state.query_log.start()
        app.state.kgqr = state
        log.info(
            "kgqr proxy ready",
            extra={
                "kgqr": {
                    "opensearch": settings.opensearch_url,
                    "neural_search": state.neural_search,
                }
            },
        )
        try:
            yield
        finally:
            if state.query_log is not None:
                await state.query_log.close()
            await llm.close()
            await graph.close()
            await state.upstream.close()
            await http.aclose()
            await service_http.aclose()
            await redis.aclose()

    return Starlette(
        routes=[
            Route("/metrics", metrics_endpoint, methods=["GET"]),
            *tuning_routes(run_plan),
            Route("/{path:path}", proxy, methods=["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH"]),
        ],
        lifespan=lifespan,
    )


async def _has_neural_search(http: httpx.AsyncClient) -> bool:
    try:
        response = await http.get("/_cat/plugins", params={"format": "json"})
        return any(p.get("component") == "opensearch-neural-search" for p in response.json())
    except (httpx.HTTPError, ValueError):
        return True  # assume the common case; a failing hybrid search falls back anyway


async def _ensure_definitions(http: httpx.AsyncClient, settings: Settings, pipelines: bool) -> None:
    """Install the templates of the indices the proxy writes, and kgqr's hybrid pipelines
    if missing, so the proxy works before any ingest or `kgqr plugin install`."""
    try:
        for name, body in proxy_index_templates().items():
            await http.put(f"/_index_template/{name}", json=body)
        if not pipelines:
            return
        for name, body in hybrid_pipelines(
            settings.hybrid_weights, settings.hybrid_boost_weights
        ).items():
            path = f"/_search/pipeline/{name}"
            if (await http.get(path)).status_code == 404:
                await http.put(path, json=body)
    except httpx.HTTPError as exc:
        log.warning("could not install kgqr's definitions", extra={"kgqr": {"error": str(exc)}})


async def structure_of(state: ProxyState, kb: str) -> DocumentStructure:
    """The knowledge base's document structure from kgqr-meta, cached for a minute."""
    cached = state.structures.get(kb)
    if cached and cached[0] > time.monotonic():
        return cached[1]
    response = await state.service_http.get(f"/{META_INDEX}/_doc/{kb}")
    structure = DocumentStructure()
    if response.status_code == 200:
        structure = kb_meta.KnowledgeBaseMeta.model_validate(response.json()["_source"]).structure
    state.structures[kb] = (time.monotonic() + STRUCTURE_TTL_S, structure)
    return structure


async def metrics_endpoint(request: Request) -> Response:
    """kgqr's own metrics, then those of any nginx front forwarding to this port."""
    state: ProxyState = request.app.state.kgqr
    fronts = await read_fronts(status_folder(state.settings, request.scope["server"][1]))
    body = generate_latest(metrics.REGISTRY) + render_fronts(fronts)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise RewriteRequestError(
            413, "content_too_long_exception", f"request body is larger than {limit} bytes"
        )
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RewriteRequestError(
                413, "content_too_long_exception", f"request body is larger than {limit} bytes"
            )
        chunks.append(chunk)
    return b"".join(chunks)


async def proxy(request: Request) -> Response:
    state: ProxyState = request.app.state.kgqr
    kind = "passthrough"
    try:
        body = await _read_body(request, state.settings.max_body_bytes)
        path = request.url.path
        if request.method in ("GET", "POST") and (match := SEARCH_PATH.match(path)):
            kind = "search"
            response = await handle_search(state, request, match.group(1), body)
        elif request.method in ("GET", "POST") and (match := MSEARCH_PATH.match(path)):
            kind = "msearch"
            response = await handle_msearch(state, request, match.group(1), body)
        else:
            response = await state.upstream.forward(request, body)
    except RewriteRequestError as exc:
        response = error_response(exc)
    except httpx.HTTPError as exc:
        response = error_response(upstream_unreachable(exc))
    metrics.REQUESTS.labels(kind, str(response.status_code)).inc()
    return response


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RewriteRequestError(
            400, "parse_exception", f"{what} is not valid JSON: {exc}"
        ) from exc
    if not isinstance(value, dict):
        raise RewriteRequestError(400, "parse_exception", f"{what} must be a JSON object")
    return value


async def handle_search(state: ProxyState, request: Request, index: str, raw: bytes) -> Response:
    payload = _json_object(raw, "request body")
    query_params = dict(request.query_params)
    plan = plan_search(index, query_params, payload, state.settings.rewrite_default_strategy)
    if plan is None:
        stripped = strip_kgqr(payload)
        content = raw if stripped is payload else json.dumps(stripped).encode()
        return await state.upstream.forward(request, content)
    headers = request_headers(request)
    upstream, explain = await run_plan(state, plan, query_params, headers)
    if not plan.explain:
        return to_response(upstream)  # the engine's bytes, not re-encoded
    return JSONResponse(with_explain(upstream, explain), status_code=upstream.status_code)


def with_explain(upstream: httpx.Response, explain: dict[str, Any]) -> dict[str, Any]:
    try:
        result = upstream.json()
    except ValueError:
        result = {"error": upstream.text}
    if isinstance(result, dict):
        result["kgqr"] = explain
    return dict(result)


async def run_plan(
    state: ProxyState, plan: SearchPlan, query_params: dict[str, str], headers: dict[str, str]
) -> tuple[httpx.Response, dict[str, Any]]:
    """Rewrite, search hybrid; if the hybrid search itself fails, search the original.
    Every request here carries the caller's credentials, never kgqr's."""
    began = time.perf_counter()
    caller = Caller.from_headers(headers, state.settings)
    headers = {**headers, **caller.headers}
    original = {k: v for k, v in query_params.items() if not k.startswith("kgqr.")}
    identity = await state.identities.identity(caller)
    if identity is None:  # OpenSearch refuses these credentials: its own answer, no rewrite
        refused = await state.http.post(
            f"/{plan.index}/_search", json=plan.body, params=original, headers=headers
        )
        return refused, {"strategy": plan.strategy, "refused": refused.status_code}
    gateway = OpenSearchGateway(state.http, caller.headers)
    outcome: RewriteOutcome = await state.rewriter.rewrite(
        index=plan.index,
        kb=plan.kb,
        strategy=plan.strategy,
        query=plan.parsed.text,
        params=plan.params,
        gateway=gateway,
        caller=identity,
    )
    k = int(plan.params.get("k", state.settings.rewrite_knn_k))
    body = hybrid_body(
        plan.body,
        plan.parsed,
        outcome.rewrite.expanded_text,
        np.asarray(outcome.vector, dtype=np.float32),
        k,
        boosts=outcome.rewrite.boost_ids,
    )
    params = search_params(query_params, body)
    started = time.perf_counter()
    upstream, fusion = await hybrid_search(state, plan.index, body, params, headers)
    outcome.stages_ms["search"] = round((time.perf_counter() - started) * 1000, 2)
    if upstream.status_code >= 400 and upstream.status_code not in (401, 403, 404):
        log.warning(
            "rewritten search failed",
            extra={"kgqr": {"status": upstream.status_code, "body": upstream.text[:1000]}},
        )
        reason = f"OpenSearch answered {upstream.status_code}: {redact_addresses(upstream.text)}"
        reason = reason[:300]
        outcome.fallback = {"stage": "search", "reason": reason, "strategy": plan.strategy}
        metrics.FALLBACKS.labels(plan.strategy, "search").inc()
        upstream = await state.http.post(
            f"/{plan.index}/_search", json=plan.body, params=original, headers=headers
        )
        body = plan.body
    explain = {**outcome.explain(body), "fusion": fusion}
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


async def hybrid_search(
    state: ProxyState,
    index: str,
    body: dict[str, Any],
    params: dict[str, str],
    headers: dict[str, str],
) -> tuple[httpx.Response, str]:
    """The hybrid body through the engine's pipeline, else fused in kgqr; says which.

    A caller under document-level security cannot run a `hybrid` query on OpenSearch 2.19:
    the security plugin wraps the query in its filter, and neural-search refuses a hybrid
    query that is not top-level (neural-search issue 1303). For such a caller the same
    sub-queries are fused in kgqr, so the rewrite still applies."""
    if not state.neural_search:
        return await client_side_hybrid(state.http, index, body, params, headers), "client"
    upstream = await state.http.post(f"/{index}/_search", json=body, params=params, headers=headers)
    if upstream.status_code == 400 and HYBRID_NOT_TOP_LEVEL in upstream.text:
        fused = await client_side_hybrid(state.http, index, body, params, headers)
        return fused, "client (the engine refused a hybrid query under document-level security)"
    return upstream, "pipeline"


def _ndjson(raw: bytes) -> list[dict[str, Any]]:
    lines = [line for line in raw.split(b"\n") if line.strip()]
    if len(lines) % 2:
        raise RewriteRequestError(
            400,
            "illegal_argument_exception",
            "msearch body must hold header and body lines in pairs",
        )
    return [_json_object(line, f"msearch line {n}") for n, line in enumerate(lines, start=1)]


async def handle_msearch(
    state: ProxyState, request: Request, path_index: str | None, raw: bytes
) -> Response:
    lines = _ndjson(raw)
    items = len(lines) // 2
    if items > state.settings.msearch_max_items:
        raise RewriteRequestError(
            400,
            "illegal_argument_exception",
            f"msearch holds {items} searches; at most {state.settings.msearch_max_items} "
            "are allowed (KGQR_MSEARCH_MAX_ITEMS)",
        )
    query_params = dict(request.query_params)
    headers = request_headers(request)
    checked = [
        check_header(header, path_index, line=2 * n + 1) for n, header in enumerate(lines[0::2])
    ]
    plans: list[SearchPlan | None] = []
    for header, body in zip(checked, lines[1::2], strict=True):
        plan = None
        if header.single_index is not None and not header.params:
            default = state.settings.rewrite_default_strategy
            plan = plan_search(header.single_index, query_params, body, default)
        plans.append(plan)
    if not any(plans):
        cleaned = b"".join(json.dumps(strip_kgqr(line)).encode() + b"\n" for line in lines)
        return await state.upstream.forward(request, cleaned)

    started = time.perf_counter()
    caller = Caller.from_headers(headers, state.settings)
    plain_headers = {**headers, **caller.headers}

    async def one(position: int, plan: SearchPlan | None) -> dict[str, Any]:
        if plan is None:
            header, body = checked[position], lines[2 * position + 1]
            upstream = await state.http.post(
                header.path, json=strip_kgqr(body), params=header.params, headers=plain_headers
            )
            status, result = upstream.status_code, upstream.json()
        else:
            upstream, explain = await run_plan(state, plan, query_params, headers)
            status = upstream.status_code
            result = with_explain(upstream, explain) if plan.explain else upstream.json()
        return {**result, "status": status}

    responses = await asyncio.gather(*(one(i, plan) for i, plan in enumerate(plans)))
    took = int((time.perf_counter() - started) * 1000)
    return JSONResponse({"took": took, "responses": list(responses)})
