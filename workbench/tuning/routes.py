"""HTTP endpoints of the tuning page. Searches go through the proxy's own `run_plan`, so
what the page shows is exactly what a client of the proxy gets for that strategy."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable, Mapping
from importlib import resources
from typing import Any, TypeVar

import anyio
import httpx
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from plugin import kb_meta
from plugin.schema import META_INDEX, TUNE_RUNS_INDEX, check_kb_name, documents_index
from query_rewriter.engine.errors import RewriteRequestError, error_response, upstream_unreachable
from query_rewriter.engine.forwarding import request_headers
from query_rewriter.engine.identities import AUTHINFO_PATH, credentials_refused
from query_rewriter.engine.off_loop import off_the_loop_if_large
from query_rewriter.proxy.request_body import json_object, read_body
from query_rewriter.search.plan import PassThrough, plan_search
from query_rewriter.search.service import run_plan
from query_rewriter.search.state import knowledge_base_names
from query_rewriter.strategies import AUTO_DEFAULT, by_kind
from query_rewriter.strategies.params import FUSE_PLAIN
from workbench.evaluation.cross_validation import DEFAULT_FOLDS
from workbench.evaluation.query_sets import JudgedQuery
from workbench.tuning.auto import BASELINE, StrategySetting, decide, shown_candidates
from workbench.tuning.judgment_store import JudgmentStore
from workbench.tuning.scoreboard import grades_by_query, scoreboard, scored_rankings

STATIC_TYPES = {"tune.js": "text/javascript", "tune.css": "text/css"}
RECOMMENDED = "graph"  # the README's recommendation: graph evidence, no LLM
# Measured with the local 1.5B model on 2 CPU cores (docs/results-archive.md, "Measurements").
LLM_CALL_COST = "takes 15-80 s with the local 1.5B model on 2 CPU cores"
# The page shows documents' titles and text: should one ever reach it as markup, it may
# run no script but the page's own, and no other site may frame the page to steer a
# tuner's clicks (their browser sends their credentials with every call it makes).
PAGE_HEADERS = {
    "content-security-policy": "default-src 'self'; frame-ancestors 'none'",
    "x-frame-options": "DENY",  # for browsers that do not read frame-ancestors
    "x-content-type-options": "nosniff",
}
MAX_SIZE = 50
PROMOTE_METRICS = ("R@5", "nDCG@10")


def _static(name: str) -> str:
    return resources.files("workbench.tuning").joinpath("static", name).read_text()


async def _json_body(request: Request) -> dict[str, Any]:
    """A JSON object body. Anything not sent as application/json is refused: a browser
    posts text/plain or form data from any other site without asking, JSON it does not.
    Read as the proxy reads a search: from a caller the engine knows (else its 401, the
    body unread), at most KGQR_MAX_BODY_BYTES, and parsed off the event loop when large."""
    state = request.app.state.kgqr
    if await credentials_refused(state.identities, request_headers(request), state.settings):
        raise RewriteRequestError(401, "security_exception", "missing or invalid credentials")
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise RewriteRequestError(
            415, "media_type_header_exception", "kgqr's POST endpoints accept application/json only"
        )
    limit = state.settings.proxy.max_body_bytes
    raw = await read_body(request.headers.get("content-length"), request.stream(), limit)
    return await off_the_loop_if_large(len(raw), lambda: json_object(raw, "request body"))


def _field(source: Mapping[str, Any], name: str, kind: type) -> Any:
    """A required field of a JSON body or the query string, or an OpenSearch-style 400."""
    value = source.get(name)
    if not isinstance(value, kind) or (isinstance(value, str) and not value.strip()):
        raise RewriteRequestError(
            400, "illegal_argument_exception", f"[{name}] is required ({kind.__name__})"
        )
    return value


# kgqr-judgments and kgqr-tune-runs keep a query as a keyword of at most this many
# characters (ignore_above): a longer one was stored and never found again.
MAX_JUDGED_QUERY_CHARS = 2048


def _judged_query(source: Mapping[str, Any]) -> str:
    """The query a page request names, stripped: one that can be stored and found again."""
    query = str(_field(source, "query", str)).strip()
    if len(query.encode("utf-16-le")) // 2 > MAX_JUDGED_QUERY_CHARS:  # as Java counts them
        raise RewriteRequestError(
            400, "illegal_argument_exception",
            f"[query] is longer than the {MAX_JUDGED_QUERY_CHARS} characters a judged query "
            "is kept by",
        )  # fmt: skip
    return query


def _size(body: Mapping[str, Any]) -> int:
    """How many hits to show: a whole number from 1 to MAX_SIZE (10 when not given)."""
    size = body.get("size", 10)
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_SIZE:
        raise RewriteRequestError(
            400, "illegal_argument_exception", f"[size] must be a whole number from 1 to {MAX_SIZE}"
        )
    return size


def _kb(source: Mapping[str, Any]) -> str:
    return check_kb_name(_field(source, "kb", str))


def _store(request: Request) -> JudgmentStore:
    return JudgmentStore(request.app.state.kgqr.engine.for_request(request_headers(request)))


def _errors_as_opensearch(
    handler: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    async def answered(request: Request) -> Response:
        try:
            return await handler(request)
        except RewriteRequestError as exc:
            return error_response(exc)
        except ValueError as exc:  # an invalid knowledge-base name or size
            return error_response(RewriteRequestError(400, "illegal_argument_exception", str(exc)))
        except httpx.HTTPStatusError as exc:
            return Response(
                exc.response.content,
                status_code=exc.response.status_code,
                media_type="application/json",
            )
        except httpx.HTTPError as exc:
            return error_response(upstream_unreachable(exc))

    async def wrapped(request: Request) -> Response:
        """Every answer as not to be sniffed: an error echoes what it refused (`kb=<svg
        onload=...>`), which an old browser could have read as HTML."""
        response = await answered(request)
        response.headers.setdefault("x-content-type-options", "nosniff")
        return response

    return wrapped


async def page(request: Request) -> Response:
    return HTMLResponse(_static("page.html"), headers=PAGE_HEADERS)


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in STATIC_TYPES:
        return error_response(RewriteRequestError(404, "not_found", f"no such file [{name}]"))
    return Response(_static(name), media_type=STATIC_TYPES[name], headers=PAGE_HEADERS)


async def options(request: Request) -> Response:
    """The knowledge bases (from kgqr-meta) and strategies the page offers."""
    state = request.app.state.kgqr
    try:
        kbs = await knowledge_base_names(state.engine.for_request(request_headers(request)))
    except httpx.HTTPStatusError:  # the caller may not read kgqr-meta, or there is none yet
        kbs = []
    return JSONResponse(
        {
            "kbs": kbs,
            "strategies": [
                {"name": s.name, "kind": s.kind, "llm_calls": s.llm_calls} for s in by_kind()
            ],
            "selected": preselected(state.settings.rewrite.default_strategy),
            "llm_call_cost": LLM_CALL_COST,
        }
    )


def preselected(default: str | None) -> list[str]:
    """`base` and the proxy's default strategy; where that is `base`, `auto` (which
    differs by KB) or none, the one the README recommends, `graph`. An LLM strategy is
    never pre-selected unless it is the default: each costs 15-80 s a query on these
    machines."""
    chosen = default if default not in (None, "base", AUTO_DEFAULT) else RECOMMENDED
    return ["base", chosen]


def _shown_hit(hit: dict[str, Any]) -> dict[str, Any]:
    source = hit.get("_source") or {}
    return {
        "id": hit["_id"],
        "score": hit.get("_score"),
        "title": source.get("title"),
        "type": source.get("type"),
        "snippet": str(source.get("text") or source.get("body") or "")[:240],
    }


async def search(request: Request) -> Response:
    """One strategy on one query: hits, expansions, the rewrite's details and timings;
    the ranking is stored so the scoreboard can score it against later judgments."""
    body = await _json_body(request)
    kb, query = _kb(body), _judged_query(body)
    strategy = _field(body, "strategy", str)
    fuse = body.get("fuse", False)
    if not isinstance(fuse, bool):
        raise RewriteRequestError(400, "illegal_argument_exception", "[fuse] must be a boolean")
    search_body = {
        "query": {"match": {"text": query}},
        "size": _size(body),
        "_source": ["title", "type", "text", "body"],
    }
    params = {"kgqr.strategy": strategy, "kgqr.explain": "true"}
    if fuse:  # the plain query's ranking fused in, its top kept (plain_fusion.py)
        params[f"kgqr.param.{FUSE_PLAIN.name}"] = "1"
    # A fused ranking is scored as its own row: it is not the strategy's ranking.
    shown_as = f"{strategy} fused" if fuse else strategy
    plan = plan_search(documents_index(kb), params, search_body, None)
    if isinstance(plan, PassThrough):
        raise RewriteRequestError(400, "illegal_argument_exception", plan.reason)
    started = time.perf_counter()
    upstream, explain = await run_plan(request.app.state.kgqr, plan, request_headers(request))
    total_ms = (time.perf_counter() - started) * 1000
    if upstream.status_code != 200:
        return Response(
            upstream.content, status_code=upstream.status_code, media_type="application/json"
        )
    hits = [_shown_hit(hit) for hit in upstream.json()["hits"]["hits"]]
    ranking = [h["id"] for h in hits]
    not_recorded = await _record(_store(request), kb, query, shown_as, ranking, total_ms)
    explain.pop("final_query", None)
    return JSONResponse(
        {"strategy": shown_as, "hits": hits, "explain": explain, "total_ms": round(total_ms, 1),
         "recorded": not_recorded is None, "not_recorded": not_recorded}
    )  # fmt: skip


async def _record(
    store: JudgmentStore, kb: str, query: str, strategy: str, ranking: list[str], ms: float
) -> str | None:
    """Store the ranking shown, for the scoreboard; why not, if it could not be. The search
    itself ran with the caller's read rights; recording needs write rights on kgqr's
    tuning indices, which a caller who may only search does not have."""
    try:
        await store.record_ranking(kb, query, strategy, ranking, ms)
    except httpx.HTTPStatusError as exc:
        status = exc.response.status_code
        if status in (401, 403):
            return f"OpenSearch refused you writing to {TUNE_RUNS_INDEX} ({status})"
        return f"OpenSearch answered {status} when storing the ranking"
    return None


async def judge(request: Request) -> Response:
    body = await _json_body(request)
    kb, query = _kb(body), _judged_query(body)
    doc_id = _field(body, "doc_id", str)
    relevant = body.get("relevant")
    if not isinstance(relevant, bool):
        raise RewriteRequestError(400, "illegal_argument_exception", "[relevant] must be a boolean")
    await _store(request).judge(kb, query, doc_id, 1.0 if relevant else 0.0)
    return JSONResponse({"kb": kb, "query": query, "doc_id": doc_id, "relevant": relevant})


async def judgments(request: Request) -> Response:
    """The saved judgments of one query: document id -> grade."""
    kb, query = _kb(request.query_params), _judged_query(request.query_params)
    found = await _store(request).judgments(kb, query)
    return JSONResponse({"judgments": {j.doc_id: j.grade for j in found}})


async def judgments_file(request: Request) -> Response:
    """Every judgment saved for a KB as a `kgqr eval` query set (`jsonl:FILE`, one query a
    line), so what a team judged here also scores strategies and sweeps there. Ids are
    hashes of the query: a later download names the same query alike."""
    kb = _kb(request.query_params)
    grades = grades_by_query(await _store(request).judgments(kb))
    lines = (
        JudgedQuery(_query_id(query), query, grades[query]).as_jsonl_line()
        for query in sorted(grades)
    )
    return Response(
        "".join(lines).encode(),
        media_type="application/x-ndjson",
        headers={"content-disposition": f'attachment; filename="{kb}-judgments.jsonl"'},
    )


def _query_id(query: str) -> str:
    return "q" + hashlib.sha256(query.encode()).hexdigest()[:12]


# The scoreboard's and promote's statistics (10,000 resamples a comparison, a comparison a
# strategy and metric) took seconds on a few thousand judged queries, on the event loop,
# where every caller's search waited. They run on a worker thread, one computation at a
# time, so tune-page requests queue behind each other and searches do not.
STATISTICS = anyio.CapacityLimiter(1)
T = TypeVar("T")


async def _statistics(work: Callable[..., T], *args: Any) -> T:
    return await anyio.to_thread.run_sync(work, *args, limiter=STATISTICS)


async def metrics_over_judgments(request: Request) -> Response:
    kb = _kb(request.query_params)
    store = _store(request)
    judged = await store.judgments(kb)
    rows = await _statistics(scoreboard, judged, await store.rankings(kb))
    return JSONResponse(
        {"kb": kb, "judged_queries": len({j.query for j in judged}), "strategies": rows}
    )


async def promote(request: Request) -> Response:
    """The same rule as `kgqr tune auto`, over the rankings this page showed for the KB's
    judged queries, recorded as the KB's default. Written to kgqr-meta with the caller's
    own rights: a default changes every caller's searches of the KB, so only a caller the
    engine lets write kgqr-meta may set one, as with `kgqr kb set-default`."""
    body = await _json_body(request)
    kb, metric = _kb(body), body.get("metric", "R@5")
    if metric not in PROMOTE_METRICS:
        known = ", ".join(PROMOTE_METRICS)
        raise RewriteRequestError(
            400, "illegal_argument_exception", f"[metric] must be one of {known}"
        )
    store = _store(request)
    judged, rankings = await store.judgments(kb), await store.rankings(kb)
    shown = await _statistics(lambda: shown_candidates(scored_rankings(judged, rankings)))
    queries = len(next(iter(shown.values()), {}))
    if StrategySetting(BASELINE) not in shown or queries < 2:
        raise RewriteRequestError(400, "illegal_argument_exception",
                                  "judge at least two queries with base among the strategies "
                                  "run for each, then promote")  # fmt: skip
    decision = await _statistics(decide, shown, metric, min(DEFAULT_FOLDS, queries))
    if decision.promoted is None:  # too few: the KB keeps the default it has
        raise RewriteRequestError(400, "illegal_argument_exception", decision.reason())
    session = request.app.state.kgqr.engine.for_request(request_headers(request))
    authinfo = await session.send("GET", AUTHINFO_PATH)
    user = authinfo.json().get("user_name") if authinfo.status_code == 200 else None
    chosen = await record_default(
        session, kb, decision.promoted.strategy, decision.promoted.params, decision.reason(),
        kb_meta.set_by("tune page", user if isinstance(user, str) else None), decision.evidence(),
    )  # fmt: skip
    return JSONResponse({"kb": kb, "default": chosen.model_dump(exclude={"evidence"}),
                         "evidence": decision.evidence()})  # fmt: skip


async def record_default(
    session: Any,
    kb: str,
    strategy: str,
    params: dict[str, float],
    reason: str,
    set_by: str,
    evidence: dict[str, Any],
) -> kb_meta.KbDefault:
    """The KB's next default version, written as the caller over the record it was
    numbered from, as `kgqr kb set-default` writes it (kb_meta.set_default): written over
    whatever landed meanwhile, a promotion and a set-default at once both numbered
    themselves N+1, and the later one's history dropped the other's version."""
    for _ in range(kb_meta.CONFLICT_RETRIES):
        found = await session.send("GET", f"/{META_INDEX}/_doc/{kb}")
        found.raise_for_status()
        record = found.json()
        meta = kb_meta.KnowledgeBaseMeta.model_validate(record["_source"])
        chosen, update = kb_meta.next_default(meta, strategy, params, reason, set_by, evidence)
        numbered_from = {"if_seq_no": str(record["_seq_no"]),
                         "if_primary_term": str(record["_primary_term"])}  # fmt: skip
        written = await session.send("POST", f"/{META_INDEX}/_update/{kb}", json=update,
                                     params={"refresh": "wait_for", **numbered_from})  # fmt: skip
        if written.status_code != 409:  # 409: another version landed first
            written.raise_for_status()
            return chosen
    raise RewriteRequestError(409, "version_conflict_engine_exception",
                              f"{kb!r}'s record kept changing; promote again")  # fmt: skip


def tuning_routes() -> list[Route]:
    return [
        Route("/_kgqr/tune", _errors_as_opensearch(page), methods=["GET"]),
        Route("/_kgqr/tune/static/{name}", _errors_as_opensearch(static), methods=["GET"]),
        Route("/_kgqr/tune/options", _errors_as_opensearch(options), methods=["GET"]),
        Route("/_kgqr/tune/search", _errors_as_opensearch(search), methods=["POST"]),
        Route("/_kgqr/tune/judgments", _errors_as_opensearch(judge), methods=["POST"]),
        Route("/_kgqr/tune/judgments", _errors_as_opensearch(judgments), methods=["GET"]),
        Route(
            "/_kgqr/tune/judgments.jsonl", _errors_as_opensearch(judgments_file), methods=["GET"]
        ),
        Route(
            "/_kgqr/tune/metrics", _errors_as_opensearch(metrics_over_judgments), methods=["GET"]
        ),
        Route("/_kgqr/tune/promote", _errors_as_opensearch(promote), methods=["POST"]),
    ]
