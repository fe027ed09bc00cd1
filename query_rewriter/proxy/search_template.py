"""Search templates (`/{index}/_search/template`): rewritten like the search they render.

Applications often keep their queries as stored mustache templates and send only a
template id and parameters; through kgqr such a search on a knowledge base went on as it
came, never rewritten. kgqr has the engine render the template (`_render/template`, with
the caller's credentials, so a template they may not use stays theirs to be refused) and
plans the rendered search like any other. What the engine will not render, and what
passes through, is sent on as the caller sent it: the engine answers it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import httpx

from query_rewriter.engine.errors import RewriteRequestError
from query_rewriter.engine.forwarding import answer_content, json_answer
from query_rewriter.engine.off_loop import off_the_loop_if_large
from query_rewriter.proxy.request_body import json_object
from query_rewriter.search.plan import engine_params
from query_rewriter.search.state import ProxyState

TEMPLATE_PATH = re.compile(r"^/([^/_][^/]*)/_search/template/?\Z")
TEMPLATE_KEYS = ("id", "source", "params")
# A template request's own switches, which replace the rendered search's own: the engine
# sets them from the request whatever the template says (false unless the request says
# true). Kept from the template instead, a source with `explain: true` explained every hit
# the engine would not have.
SEARCH_SWITCHES = ("explain", "profile")
# What `_search` reads from its URL into the search itself (RestSearchAction's
# parseSearchSource). On `_search/template` the engine reads and checks them, then replaces
# that search with the rendered one (measured on 2.19: `?size=1` answers every hit,
# `?size=abc` is its 400). kgqr applied them to the rendered search. `track_total_hits`
# alone is kept, where the template sets none.
SEARCH_URL_PARAMS = frozenset((
    "q", "df", "analyzer", "analyze_wildcard", "lenient", "default_operator",
    "from", "size", "explain", "version", "seq_no_primary_term", "timeout",
    "terminate_after", "stored_fields", "docvalue_fields", "_source", "_source_includes",
    "_source_excludes", "sort", "stats", "track_scores", "track_total_hits",
    "include_named_queries_score", "suggest_field", "suggest_text", "suggest_size",
    "suggest_mode",
))  # fmt: skip


def template_of(request: dict[str, Any]) -> dict[str, Any]:
    """The template a request names (`id` or `source`, and `params`), without its switches."""
    return {key: request[key] for key in TEMPLATE_KEYS if key in request}


async def rendered_search(
    state: ProxyState, request: dict[str, Any], headers: dict[str, str]
) -> dict[str, Any] | str:
    """The search a template request renders to, rendered by the engine as the caller, or
    why there is none. Rendering is a cluster permission
    (`indices:data/read/search/template/render`) that a role which may only read a
    knowledge base lacks: its 403 here passes its template searches through."""
    if unknown := sorted(set(request) - {*TEMPLATE_KEYS, *SEARCH_SWITCHES}):
        # The engine refuses such a request ("[search_template] unknown field [size]"):
        # sent on as it came, it answers that; rendered, kgqr ran the search with them.
        return f"the template request has fields the engine does not read: {unknown}"
    switches = {key: _switch(request[key]) for key in SEARCH_SWITCHES if key in request}
    if odd := sorted(key for key, on in switches.items() if on is None):
        # `"explain": "maybe"` is the engine's 400; kgqr took it for false.
        return f"the template request's {odd} are not true or false"
    template = template_of(request)
    as_caller = state.engine.for_request(headers)
    answer = await as_caller.send("POST", "/_render/template", json=template)
    if answer.status_code != 200:
        return f"the engine did not render the template for the caller ({answer.status_code})"
    try:
        # Read as a body sent to kgqr is: the engine renders text that is no JSON (`{{q}}`
        # unquoted) or holds a key twice with a 200, and its parameters (`{{#toJson}}`)
        # may nest it past 128 levels. Its search of such a rendering is its own to run.
        output = json_object(answer.content, "the rendered template").get("template_output")
    except RewriteRequestError as exc:
        return f"the engine's rendering is not a search kgqr reads: {exc.reason}"
    if not isinstance(output, dict):
        return "the engine rendered no search"
    searched = {key: value for key, value in output.items() if key not in SEARCH_SWITCHES}
    return {**searched, **{key: True for key, on in switches.items() if on}}


def _switch(value: Any) -> bool | None:
    """A template request's switch as the engine reads it (`true` or `"true"`), or None."""
    if isinstance(value, bool):
        return value
    return {"true": True, "false": False}.get(value) if isinstance(value, str) else None


async def template_search_params(
    state: ProxyState,
    index: str,
    query_params: Mapping[str, str],
    request: dict[str, Any],
    rendered: dict[str, Any],
    headers: dict[str, str],
) -> dict[str, str] | str:
    """The URL parameters of the search a template request runs as the engine runs it
    (SEARCH_URL_PARAMS dropped), or why the engine must answer it. Which values the engine
    refuses (`size=abc`, `timeout=10`, `df` without `q`, `suggest_field`'s 500) only it
    says exactly: a request carrying any is first run by the engine as it came, as the
    caller (its own template: a cluster that runs stored templates only refuses any
    other)."""
    ignored = SEARCH_URL_PARAMS.intersection(query_params)
    if not ignored:
        return dict(query_params)
    template = template_of(request)
    check = await state.engine.for_request(headers).send(
        "POST", f"/{index}/_search/template", json=template, params=engine_params(query_params)
    )
    if check.status_code != 200:
        return (
            f"URL parameters the engine refuses on a template search ({check.status_code}): "
            "it answers the request as it came"
        )
    kept = {k: v for k, v in query_params.items() if k not in ignored}
    if "track_total_hits" in query_params and "track_total_hits" not in rendered:
        kept["track_total_hits"] = query_params["track_total_hits"]
    return kept


async def template_answer(upstream: httpx.Response) -> httpx.Response:
    """A search's answer as `_search/template` writes it: with the top-level `"status"`
    the engine adds there (and not to `_search`'s)."""
    return await off_the_loop_if_large(len(upstream.content), lambda: _with_status(upstream))


def _with_status(upstream: httpx.Response) -> httpx.Response:
    if not upstream.is_success:
        return upstream
    try:
        content = answer_content(upstream)
    except ValueError:
        return upstream
    if not isinstance(content, dict) or "status" in content:
        return upstream
    return json_answer({**content, "status": upstream.status_code}, upstream)
