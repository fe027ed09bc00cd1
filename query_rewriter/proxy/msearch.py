"""`_msearch`: managed items rewritten (each through the search service), the others sent
as their headers say, answered as one msearch."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response

from query_rewriter import metrics
from query_rewriter.engine.answer_format import AnswerFormat, json_params, with_explain
from query_rewriter.engine.errors import RewriteRequestError
from query_rewriter.engine.forwarding import about_the_request, bytes_to_read, request_headers
from query_rewriter.engine.json_codec import CommentBudget, dumps
from query_rewriter.engine.off_loop import off_the_loop_if_large
from query_rewriter.proxy.msearch_header import MsearchHeader, check_header
from query_rewriter.proxy.request_body import (
    body_and_params,
    expected_an_object,
    json_object,
)
from query_rewriter.proxy.search_template import rendered_search
from query_rewriter.search.plan import (
    PassThrough,
    SearchPlan,
    engine_params,
    engine_written,
    explain_asked,
    plan_search,
    strip_kgqr,
    url_int,
)
from query_rewriter.search.service import (
    FALLBACK_HEADER,
    fallback_header,
    run_plan,
)
from query_rewriter.search.state import ProxyState

# What applies to the msearch as a whole, not to each of its searches.
MSEARCH_ONLY_PARAMS = {"max_concurrent_searches"}
# An item whose header names several indices, or none, is forwarded as it is: kgqr
# rewrites a search on one knowledge base.
NOT_ONE_INDEX = PassThrough("msearch_header", "the item's header names more than one index")


def _ndjson(raw: bytes, max_items: int) -> list[dict[str, Any]]:
    """The header and body lines of an msearch, at most `max_items` pairs, read as the
    engine reads them: the body ends with a newline; one newline before the first line is
    skipped; every other line counts, a blank header being the default one (`{}`) and a
    blank body the engine's 400; a last header without its body is left out. (kgqr left
    out every blank line: a blank header shifted the pairs, and fewer searches were
    answered than were sent.)"""
    if raw and not raw.endswith(b"\n"):
        raise RewriteRequestError(
            400,
            "illegal_argument_exception",
            "The msearch request must be terminated by a newline [\n]",
        )
    text = raw[1:] if raw.startswith(b"\n") else raw
    lines = text[:-1].split(b"\n") if text else []
    del lines[len(lines) - len(lines) % 2 :]
    for at in range(0, len(lines), 2):
        if not lines[at].strip():
            lines[at] = b"{}"
        if not lines[at + 1].strip():
            raise expected_an_object("null")
    if len(lines) // 2 > max_items:
        raise RewriteRequestError(
            400,
            "illegal_argument_exception",
            f"msearch holds {len(lines) // 2} searches; at most {max_items} are allowed "
            "(KGQR_MSEARCH_MAX_ITEMS)",
        )
    comments = CommentBudget()
    return [json_object(line, f"msearch line {n}", rest_ignored=True, comments=comments)
            for n, line in enumerate(lines, start=1)]  # fmt: skip


async def handle_msearch_template(
    state: ProxyState, request: Request, path_index: str | None, raw: bytes
) -> Response:
    """`_msearch/template`: when an item searches one knowledge base, every item's template
    is rendered by the engine as the caller (search_template) and the rendered searches
    answered as one `_msearch`. Sent on as it came when no item searches a knowledge base,
    or when the engine does not render one of them for the caller (it answers then)."""
    lines, checked = await _read_items(raw, path_index, state.settings.proxy.msearch_max_items)
    targets = [await state.kb_indices.target(h.single_index or "") for h in checked]
    if not any(targets):
        return await state.engine.forward(request, raw, decoded=True)
    headers = request_headers(request)
    rendered = await asyncio.gather(
        *(rendered_search(state, template, headers) for template in lines[1::2])
    )
    bodies = [search for search in rendered if isinstance(search, dict)]
    if len(bodies) < len(rendered):
        metrics.PASSED_THROUGH.labels("template").inc()
        return await state.engine.forward(request, raw, decoded=True)
    searches = [line for pair in zip(lines[0::2], bodies, strict=True) for line in pair]
    query_params = dict(request.query_params)
    return await _answer(state, request, query_params, searches, checked, False, as_sent=raw)


async def handle_msearch(
    state: ProxyState, request: Request, path_index: str | None, raw: bytes
) -> Response:
    raw, query_params, in_url = body_and_params(raw, request.query_params)
    lines, checked = await _read_items(raw, path_index, state.settings.proxy.msearch_max_items)
    return await _answer(state, request, query_params, lines, checked, in_url)


async def _read_items(
    raw: bytes, path_index: str | None, max_items: int
) -> tuple[list[dict[str, Any]], list[MsearchHeader]]:
    return await off_the_loop_if_large(len(raw), lambda: _items(raw, path_index, max_items))


def _items(
    raw: bytes, path_index: str | None, max_items: int
) -> tuple[list[dict[str, Any]], list[MsearchHeader]]:
    """An msearch's lines and its headers checked."""
    lines = _ndjson(raw, max_items)
    checked = [
        check_header(header, path_index, line=2 * n + 1) for n, header in enumerate(lines[0::2])
    ]
    return lines, checked


async def _answer(
    state: ProxyState,
    request: Request,
    query_params: dict[str, str],
    lines: list[dict[str, Any]],
    checked: list[MsearchHeader],
    in_url: bool,
    as_sent: bytes | None = None,
) -> Response:
    """Each item rewritten or sent as its header says, answered as one msearch. `as_sent`:
    what to forward on the request's own path when every item passes through (an
    `_msearch/template`'s own body); by default the lines less kgqr's options."""
    headers = request_headers(request)
    plans: list[SearchPlan | PassThrough] = []
    for header, body in zip(checked, lines[1::2], strict=True):
        if header.single_index is not None:
            # The header's options (request_cache, routing, ... as opensearch-dsl's
            # MultiSearch sets them) are the item's own URL parameters.
            default = state.settings.rewrite.default_strategy
            params = {**query_params, **header.params}
            target = await state.kb_indices.target(header.single_index)
            plans.append(plan_search(header.single_index, params, body, default, target))
        else:
            plans.append(replace(NOT_ONE_INDEX, explain=explain_asked(query_params, body)))
    if (binary := engine_written(query_params)) is not None:
        plans = [binary] * len(plans)
    for plan in plans:
        if isinstance(plan, PassThrough):
            metrics.PASSED_THROUGH.labels(plan.code).inc()
    if not in_url and all(isinstance(plan, PassThrough) and not plan.explain for plan in plans):
        cleaned = b"".join(dumps(strip_kgqr(line)) + b"\n" for line in lines)
        return await state.engine.forward(request, as_sent or cleaned, decoded=True)

    concurrent = query_params.get("max_concurrent_searches")  # the engine's alone: checked
    if concurrent is not None and url_int("max_concurrent_searches", concurrent) < 1:
        raise RewriteRequestError(
            400, "illegal_argument_exception", "maxConcurrentSearchRequests must be positive"
        )
    started = time.perf_counter()
    as_caller = state.engine.for_request(headers)

    # What applies to each search, not to the msearch as a whole; kgqr reads the answers
    # as plain JSON and writes the whole in the caller's format.
    item_params = {k: v for k, v in query_params.items() if k not in MSEARCH_ONLY_PARAMS}
    item_params = json_params(item_params)
    fallbacks: list[str] = []
    answered: list[httpx.Response] = []  # each item's, for the headers about the request

    async def one(position: int, plan: SearchPlan | PassThrough) -> dict[str, Any]:
        own = engine_params({**item_params, **checked[position].params})
        if isinstance(plan, PassThrough):
            # The msearch's parameters too (typed_keys, rest_total_hits_as_int, ...): sent
            # with the header's alone, a passed-through item answered in another shape
            # than its rewritten neighbours, and opensearch-java could not read it.
            body = lines[2 * position + 1]
            upstream = await as_caller.send(
                "POST", checked[position].path, json=strip_kgqr(body), params=own
            )
            shown = plan.explanation() if plan.explain else None
        else:
            upstream, explain = await run_plan(state, replace(plan, sent_params=own), headers)
            shown = explain if plan.explain else None
            if fallback := explain.get("fallback"):
                fallbacks.append(f"item {position} {fallback_header(fallback)}")
        answered.append(upstream)
        read = bytes_to_read(upstream)
        result = await off_the_loop_if_large(read, lambda: with_explain(upstream, shown))
        return {**result, "status": upstream.status_code}

    responses = await asyncio.gather(*(one(i, plan) for i, plan in enumerate(plans)))
    took = int((time.perf_counter() - started) * 1000)
    answer = AnswerFormat.of(query_params)
    explained = any(plan.explain for plan in plans)
    response = await answer.response(
        {"took": took, "responses": list(responses)},
        200,
        explain_at="responses.kgqr" if explained else None,
        headers=about_the_request(*answered),
        size=sum(len(upstream.content) for upstream in answered),
    )
    if fallbacks:
        response.headers[FALLBACK_HEADER] = "; ".join(sorted(fallbacks))[:400]
    return response
