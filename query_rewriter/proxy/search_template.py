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
# A template request's own switches, which replace the rendered search's own: the engine
# sets them from the request whatever the template says (false unless the request says
# true). Kept from the template instead, a source with `explain: true` explained every hit
# the engine would not have.
SEARCH_SWITCHES = ("explain", "profile")


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
    template = {key: request[key] for key in TEMPLATE_KEYS if key in request}
    as_caller = state.engine.for_request(headers)
    answer = await as_caller.send("POST", "/_render/template", json=template)
    output = answer.json().get("template_output") if answer.status_code == 200 else None
    if not isinstance(output, dict):
        return f"the engine did not render the template for the caller ({answer.status_code})"
    searched = {key: value for key, value in output.items() if key not in SEARCH_SWITCHES}
    return {**searched, **{key: True for key in SEARCH_SWITCHES if request.get(key) is True}}
