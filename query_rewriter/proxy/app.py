"""The kgqr proxy: OpenSearch's REST API, with `_search` / `_msearch` on kgqr-managed
indices rewritten and sent as hybrid searches; every other request passes through."""

from __future__ import annotations

import hmac
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from kgqr_core import connections
from kgqr_core.llm import AsyncLlmClient
from kgqr_core.settings import Settings, get_settings
from plugin.schema import META_INDEX, hybrid_pipelines, meta_mapping_update, proxy_index_templates
from query_rewriter import metrics
from query_rewriter.engine.answer_format import AnswerFormat
from query_rewriter.engine.caller import Caller
from query_rewriter.engine.errors import (
    RewriteRequestError,
    error_response,
    internal_error,
    kgqr_failure,
    upstream_unreachable,
)
from query_rewriter.engine.forwarding import (
    request_headers,
    to_response,
)
from query_rewriter.engine.gateway import Engine
from query_rewriter.engine.identities import IdentityResolver, credentials_refused
from query_rewriter.engine.json_codec import dumps
from query_rewriter.engine.node_plugins import has_neural_search
from query_rewriter.engine.off_loop import off_the_loop_if_large
from query_rewriter.graph.copies import GraphSnapshots, SnapshotGraph
from query_rewriter.graph.projection import ProjectedGraph
from query_rewriter.proxy.front_status import read_fronts, render_fronts, status_folder
from query_rewriter.proxy.msearch import handle_msearch, handle_msearch_template
from query_rewriter.proxy.request_body import (
    body_and_params,
    decoded_off_the_loop,
    json_object,
    read_body,
)
from query_rewriter.proxy.search_template import (
    TEMPLATE_PATH,
    rendered_search,
    template_answer,
    template_search_params,
)
from query_rewriter.search.cache import RewriteCache, code_version
from query_rewriter.search.plan import (
    PassThrough,
    engine_params,
    engine_read,
    explain_asked,
    plan_search,
    strip_kgqr,
    uri_search_as_body,
)
from query_rewriter.search.query_embedders import QueryEmbedders
from query_rewriter.search.query_log import QueryLog
from query_rewriter.search.rewriter import Rewriter
from query_rewriter.search.service import (
    FALLBACK_HEADER,
    fallback_header,
    passed_through_search,
    run_plan,
)
from query_rewriter.search.state import (
    ProxyState,
    knowledge_base_names,
    meta_of,
    recorded_embedders,
)
from query_rewriter.strategies import check_default_strategy

log = logging.getLogger("kgqr.proxy")
SEARCH_PATH = re.compile(r"^/([^/_][^/]*)/_search/?\Z")
MSEARCH_PATH = re.compile(r"^/(?:([^/_][^/]*)/)?_msearch/?\Z")
MSEARCH_TEMPLATE_PATH = re.compile(r"^/(?:([^/_][^/]*)/)?_msearch/template/?\Z")
# What the engine asks of a caller for its own node stats (cluster:monitor/nodes/stats).
NODE_STATS_PROBE = "/_nodes/_local/stats/process"
CLIENT_CLOSED = 499  # nginx's status for a request its client abandoned


def create_app(
    settings: Settings | None = None, extra_routes: Sequence[BaseRoute] = ()
) -> Starlette:
    """The proxy. `extra_routes` are pages mounted beside the engine's API (the workbench's
    tuning page, kgqr_ops/proxy_app.py): the read path does not know them."""
    settings = settings or get_settings()
    check_default_strategy(settings.rewrite.default_strategy)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        import redis.asyncio as aioredis

        engine = Engine.connect(settings)
        service_http = engine.service  # kgqr's bookkeeping: log, definitions, plugins
        log.info("OpenSearch nodes", extra={"kgqr": {"nodes": await engine.learn_nodes()}})

        def redis_at(url: str) -> aioredis.Redis:
            timeout = settings.redis.timeout_s
            return aioredis.Redis.from_url(
                url, socket_timeout=timeout, socket_connect_timeout=timeout
            )

        redis = redis_at(settings.redis.cache_url)
        # Graph versions are ingest's records (kgqr_core/graph_version.py), beside its jobs.
        ingest_redis = redis_at(settings.redis.url)
        graph = connections.async_neo4j_driver(settings)
        embedders = QueryEmbedders.from_settings(settings)
        # Loaded before the first search, not during it.
        preloaded = await embedders.preload(lambda: recorded_embedders(engine.as_kgqr()))
        log.info("query embedders loaded", extra={"kgqr": {"models": preloaded}})
        await anyio.to_thread.run_sync(code_version)  # reads kgqr's files: not on the loop

        snapshots = GraphSnapshots(settings, ingest_redis)
        await snapshots.preload(
            settings.graph.snapshot_preload, lambda: knowledge_base_names(engine.as_kgqr())
        )
        projection = (
            ProjectedGraph(engine.as_kgqr, settings.graph.snapshot_check_s)
            if settings.graph.projection_reads
            else None
        )
        llm = AsyncLlmClient(settings, redis)
        stop_following = metrics.follow(metrics.LLM_WAITING, lambda: llm.waiting)
        state = ProxyState(
            settings,
            engine,
            redis,
            Rewriter(
                settings,
                llm,
                RewriteCache(
                    redis, settings.rewrite.cache_ttl_s, settings.rewrite.cache_max_entry_bytes
                ),
                embedders,
                lambda kb: meta_of(state, kb),
                SnapshotGraph(graph, snapshots, projection),
                engine.as_kgqr(),
            ),
            IdentityResolver(engine),
            query_log=QueryLog(service_http) if settings.proxy.query_log_enabled else None,
        )
        fusion = settings.rewrite.hybrid_fusion
        state.neural_search = fusion == "pipeline" or (
            fusion == "auto" and await has_neural_search(service_http)
        )
        await _ensure_definitions(service_http, settings, pipelines=state.neural_search)
        if state.query_log is not None:
            state.query_log.start()
        app.state.kgqr = state
        log.info(
            "kgqr proxy ready",
            extra={
                "kgqr": {
                    "opensearch": settings.opensearch.url,
                    "neural_search": state.neural_search,
                }
            },
        )
        try:
            yield
        finally:
            stop_following()
            metrics.process_ended()
            if state.query_log is not None:
                await state.query_log.close()
            await llm.close()
            await graph.close()
            await engine.close()
            await redis.aclose()
            await ingest_redis.aclose()

    return Starlette(
        routes=[
            Route(metrics.PATH, metrics_endpoint, methods=["GET"]),
            *extra_routes,
            Route("/{path:path}", proxy, methods=ENGINE_METHODS),
        ],
        lifespan=lifespan,
        exception_handlers={Exception: internal_error},
    )


# Every method OpenSearch's REST layer knows (RestRequest.Method), so the engine answers
# each as it would directly: OPTIONS is a browser's CORS preflight (kgqr's 405 to it
# stopped every browser app), TRACE and CONNECT get the engine's own 405.
ENGINE_METHODS = ["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH", "OPTIONS", "TRACE", "CONNECT"]


async def _ensure_definitions(http: httpx.AsyncClient, settings: Settings, pipelines: bool) -> None:
    """Install the templates of the indices the proxy writes, and kgqr's hybrid pipelines
    as the settings weigh them, so the proxy works before any ingest or `kgqr plugin
    install`, and a changed KGQR_HYBRID_WEIGHTS takes effect on restart (a pipeline was
    once installed only when missing: the engine kept the old weights while kgqr's own
    fusion, for callers under document-level security, used the new ones)."""
    try:
        for name, body in proxy_index_templates().items():
            put = await http.put(f"/_index_template/{name}", json=body)
            if put.status_code != 200:  # its index would be mapped field by field
                log.warning(
                    "could not install an index template (one of the same patterns and "
                    "priority, or no right to templates)",
                    extra={"kgqr": {"template": name, "status": put.status_code,
                                    "error": put.text[:300]}},
                )  # fmt: skip
        await _ensure_meta_mapping(http)
        if not pipelines:
            return
        for name, body in hybrid_pipelines(
            settings.rewrite.hybrid_weights, settings.rewrite.hybrid_boost_weights
        ).items():
            await _ensure_pipeline(http, name, body)
    except httpx.HTTPError as exc:
        log.warning("could not install kgqr's definitions", extra={"kgqr": {"error": str(exc)}})


async def _ensure_meta_mapping(http: httpx.AsyncClient) -> None:
    """kgqr-meta's fields as kgqr defines them, on an existing kgqr-meta: the tune page
    writes a default's evidence there with the caller's rights, and an older kgqr-meta
    would map it field by field. Put here, at start, and not when a caller promotes: a
    caller who may not write kgqr-meta had kgqr's account change its mapping."""
    current = await http.get(f"/{META_INDEX}/_mapping")
    if current.status_code == 404:
        return  # made from kgqr's template (`kgqr plugin install`, any ingest or attach)
    if current.status_code != 200:
        log.warning("kgqr-meta's mapping not read", extra={"kgqr": {"error": current.text[:300]}})
        return
    update = meta_mapping_update(current.json())
    mapped = await http.put(f"/{META_INDEX}/_mapping", json=update)
    if mapped.status_code != 200:
        log.warning("kgqr-meta's mapping not updated", extra={"kgqr": {"error": mapped.text[:300]}})


async def _ensure_pipeline(http: httpx.AsyncClient, name: str, body: dict[str, Any]) -> None:
    path = f"/_search/pipeline/{name}"
    found = await http.get(path)
    installed = found.json().get(name) if found.status_code == 200 else None
    if installed == body:
        return
    put = await http.put(path, json=body)
    if put.status_code != 200:
        log.warning(
            "could not install a hybrid pipeline; searches use the one there is, if any",
            extra={"kgqr": {"pipeline": name, "status": put.status_code, "error": put.text}},
        )
    elif installed is not None:  # other proxies on this cluster now use these weights too
        log.warning(
            "replaced a hybrid pipeline with the configured weights",
            extra={"kgqr": {"pipeline": name, "was": installed, "now": body}},
        )


async def metrics_endpoint(request: Request) -> Response:
    """kgqr's own metrics, then those of any nginx front forwarding to this port, for the
    callers who may read the engine's own node stats (or who hold KGQR_METRICS_TOKEN):
    open to anyone, they told of every KB's searches, strategies and fallbacks."""
    state: ProxyState = request.app.state.kgqr
    if (refused := await _metrics_refused(state, request)) is not None:
        return refused
    fronts = await read_fronts(status_folder(state.settings, request.scope["server"][1]))
    body = metrics.exposition() + render_fronts(fronts)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


async def _metrics_refused(state: ProxyState, request: Request) -> Response | None:
    """The answer that refuses the request its metrics, or None when it may read them."""
    token = state.settings.proxy.metrics_token
    sent = request.headers.get("authorization", "")
    if token is not None and hmac.compare_digest(
        sent.encode(), f"Bearer {token.get_secret_value()}".encode()
    ):
        return None
    caller = Caller.from_headers(request_headers(request), state.settings)
    try:
        stats = await state.engine.as_caller(caller).send(
            "GET", NODE_STATS_PROBE, params={"filter_path": "_nodes"}
        )
    except httpx.HTTPError as exc:
        return error_response(upstream_unreachable(exc))
    return None if stats.status_code == 200 else to_response(stats)


async def proxy(request: Request) -> Response:
    state: ProxyState = request.app.state.kgqr
    read = planned_read(request)
    # By the path, not by how far the request got: a search refused (a 400, a 413) or
    # abandoned was counted as a pass-through.
    kind = "passthrough" if read is None else read.kind
    try:
        response = await _dispatch(state, request, read)
    except RewriteRequestError as exc:
        response = error_response(exc)
    except httpx.HTTPError as exc:
        response = error_response(upstream_unreachable(exc))
    except ClientDisconnect:
        # Gone while sending its body: nginx's 499, for the metrics and the log. It was
        # logged as a kgqr bug (a 500, with a traceback).
        log.info("client closed the connection before its body was read",
                 extra={"kgqr": {"path": request.url.path}})  # fmt: skip
        response = Response(status_code=CLIENT_CLOSED)
    except Exception as exc:  # a kgqr bug: still an error clients can parse, and logged
        log.exception("request failed in kgqr", extra={"kgqr": {"path": request.url.path}})
        response = error_response(kgqr_failure(exc))
    opaque_id = request.headers.get("x-opaque-id")
    if opaque_id is not None and "x-opaque-id" not in response.headers:
        # The engine echoes it on every answer, errors too, for the caller's tracing; an
        # answer kgqr wrote itself came back without it.
        response.headers["x-opaque-id"] = opaque_id
    metrics.REQUESTS.labels(kind, str(response.status_code)).inc()
    return response


@dataclass(frozen=True)
class PlannedRead:
    """A read kgqr plans: its kind for the metrics, what handles it, the index its path
    names (none for an msearch of several)."""

    kind: str
    handle: Callable[[ProxyState, Request, Any, bytes], Awaitable[Response]]
    index: str | None


def planned_read(request: Request) -> PlannedRead | None:
    """The read kgqr plans that the request is, by its path; None for the rest, which
    goes to the engine as sent."""
    if request.method not in ("GET", "POST"):
        return None
    for path, kind, handle in (
        (SEARCH_PATH, "search", handle_search),
        (TEMPLATE_PATH, "search", handle_search_template),
        (MSEARCH_PATH, "msearch", handle_msearch),
        (MSEARCH_TEMPLATE_PATH, "msearch", handle_msearch_template),
    ):
        if matched := path.match(request.url.path):
            return PlannedRead(kind, handle, matched.group(1))
    return None


async def _dispatch(state: ProxyState, request: Request, read: PlannedRead | None) -> Response:
    """The searches kgqr reads are planned, everything else is streamed to the engine as
    it arrives (only the engine's own limit applies: a 12 MB _bulk was kgqr's 413, where
    the engine and the front take it)."""
    if read is None:
        return await state.engine.forward(request)
    # The engine's HTTP layer refuses these before anything else. kgqr sends a shorter line
    # of its own, so it refuses a long one here, as the engine would have; and headers over
    # the engine's bound, sent on, were answered by nothing for a minute, then a 502.
    proxy = state.settings.proxy
    if request_line_bytes(request) > proxy.max_initial_line_bytes:
        raise RewriteRequestError(400, "too_long_http_line_exception",
                                  f"An HTTP line is larger than {proxy.max_initial_line_bytes} "
                                  "bytes.")  # fmt: skip
    if header_bytes(request) > proxy.max_header_bytes:
        raise RewriteRequestError(400, "too_long_http_header_exception",
                                  f"HTTP header is larger than {proxy.max_header_bytes} "
                                  "bytes.")  # fmt: skip
    if await credentials_refused(state.identities, request_headers(request), state.settings):
        # The engine's 401, the body streamed to it unread: a caller it does not know
        # costs kgqr one identity lookup (kept 30 s), never a parse of what they sent.
        metrics.PASSED_THROUGH.labels("refused").inc()
        return await state.engine.forward(request)
    limit = state.settings.proxy.max_body_bytes
    body = await read_body(request.headers.get("content-length"), request.stream(), limit)
    body = await decoded_off_the_loop(body, request.headers.get("content-encoding"), limit)
    if foreign := engine_read(request.headers.get("content-type"), body):
        metrics.PASSED_THROUGH.labels(foreign.code).inc()
        return await state.engine.forward(request, body, decoded=True)
    return await read.handle(state, request, read.index, body)


def header_bytes(request: Request) -> int:
    """The request's header lines as sent (`name: value`), in bytes."""
    return sum(len(name) + 2 + len(value) for name, value in request.scope.get("headers", ()))


def request_line_bytes(request: Request) -> int:
    """`METHOD /path?query HTTP/1.1` as sent, in bytes."""
    query: bytes = request.scope.get("query_string", b"")
    path: bytes = request.scope.get("raw_path") or request.url.path.encode()
    return len(request.method) + 1 + len(path) + (len(query) + 1 if query else 0) + 9


async def handle_search(state: ProxyState, request: Request, index: str, raw: bytes) -> Response:
    raw, url_params, in_url = body_and_params(raw, request.query_params)
    payload = await off_the_loop_if_large(len(raw), lambda: json_object(raw, "request body"))
    query_params, body = uri_search_as_body(url_params, payload)
    stripped = strip_kgqr(payload)
    as_sent = raw if stripped is payload else dumps(stripped)
    return await _search(state, request, index, query_params, body, in_url, as_sent)


async def handle_search_template(
    state: ProxyState, request: Request, index: str, raw: bytes
) -> Response:
    """A template search on a knowledge base, planned as the search it renders; anything
    else (another index, a body only the engine reads, a template it will not render for
    the caller) is sent on as it came."""
    target = await state.kb_indices.target(index)
    if target is None:
        return await state.engine.forward(request, raw, decoded=True)
    query_params, headers = dict(request.query_params), request_headers(request)
    payload = await off_the_loop_if_large(len(raw), lambda: json_object(raw, "request body"))
    rendered = await rendered_search(state, payload, headers)
    if isinstance(rendered, dict):
        searched = await template_search_params(
            state, index, query_params, payload, rendered, headers
        )
        if isinstance(searched, dict):
            return await _search(state, request, index, searched, rendered, False, raw, True)
        rendered = searched
    explain = explain_asked(query_params, {})
    metrics.PASSED_THROUGH.labels("template").inc()
    if not explain:
        return await state.engine.forward(request, raw, decoded=True)
    answer = AnswerFormat.of(query_params)
    plan = PassThrough("template", rendered, True, engine_params(query_params), answer)
    upstream = await passed_through_search(
        state, index, payload, plan, headers, endpoint="_search/template"
    )
    return await plan.answer.written(upstream, plan.explanation())


async def _search(
    state: ProxyState,
    request: Request,
    index: str,
    query_params: dict[str, str],
    body: dict[str, Any],
    in_url: bool,
    as_sent: bytes,
    template: bool = False,
) -> Response:
    """The search `body` rewritten, or passed through: `as_sent` on the request's own path
    when kgqr need not read the answer. `template`: the request was a template search,
    and the answer is written as that endpoint's."""
    default = state.settings.rewrite.default_strategy
    plan = plan_search(index, query_params, body, default, await state.kb_indices.target(index))
    headers = request_headers(request)
    if isinstance(plan, PassThrough):
        metrics.PASSED_THROUGH.labels(plan.code).inc()
        if plan.explain or in_url:  # kgqr reads the answer to explain it, or sends the
            # body the URL held as a body (forwarded, the URL would still hold it).
            upstream = await passed_through_search(state, index, body, plan, headers)
            if template:
                upstream = await template_answer(upstream)
            return await plan.answer.written(upstream, plan.explanation() if plan.explain else None)
        return await state.engine.forward(request, as_sent, decoded=True)
    upstream, explain = await run_plan(state, plan, headers)
    if template:
        upstream = await template_answer(upstream)
    response = await plan.answer.written(upstream, explain if plan.explain else None)
    if fallback := explain.get("fallback"):
        response.headers[FALLBACK_HEADER] = fallback_header(fallback)
    return response
