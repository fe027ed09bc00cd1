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
from typing import Any

from query_rewriter.search.state import ProxyState

TEMPLATE_PATH = re.compile(r"^/([^/_][^/]*)/_search/template/?\Z")
TEMPLATE_KEYS = ("id", "source", "params")
# A template request's own switches, which the search it renders takes as its options.
SEARCH_SWITCHES = ("explain", "profile")


async def rendered_search(
    state: ProxyState, request: dict[str, Any], headers: dict[str, str]
) -> dict[str, Any] | str:
    """The search a template request renders to, rendered by the engine as the caller, or
    why there is none. Rendering is a cluster permission
    (`indices:data/read/search/template/render`) that a role which may only read a
    knowledge base lacks: its 403 here passes its template searches through."""
    template = {key: request[key] for key in TEMPLATE_KEYS if key in request}
    as_caller = state.engine.for_request(headers)
    answer = await as_caller.send("POST", "/_render/template", json=template)
    output = answer.json().get("template_output") if answer.status_code == 200 else None
    if not isinstance(output, dict):
        return f"the engine did not render the template for the caller ({answer.status_code})"
    switches = {key: True for key in SEARCH_SWITCHES if request.get(key) is True}
    return {**output, **switches}
