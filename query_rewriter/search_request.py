"""Deciding what to do with one search: which knowledge base, which strategy, which text.

Per request a client may choose a strategy with the query parameter ``kgqr.strategy`` or
an ``ext.kgqr`` object in the body (removed before forwarding), ask for an explanation
with ``kgqr.explain=true`` / ``ext.kgqr.explain``, and override parameters with
``kgqr.param.alpha=0.5`` / ``ext.kgqr.params``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from plugin.schema import kb_of_documents_index
from query_rewriter.errors import RewriteRequestError
from query_rewriter.query_text import ParsedQuery, parse_query
from query_rewriter.strategies import ALIASES, ALL_PARAMS, STRATEGIES
from query_rewriter.strategies.params import request_params


@dataclass
class SearchPlan:
    """A search kgqr will rewrite (or None from plan_search when it passes through)."""

    index: str
    kb: str
    strategy: str
    parsed: ParsedQuery
    body: dict[str, Any]
    explain: bool
    params: dict[str, float] = field(default_factory=dict)  # namespaced (strategies.params)
    warnings: tuple[str, ...] = ()  # deprecated parameter spellings the request used


def _truthy(value: Any) -> bool:
    return str(value).lower() in {"1", "true", "yes", "on"}


URL_OPTIONS = ("kgqr.strategy", "kgqr.explain")


def _strategy_options(query_params: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    ext = body.get("ext")
    given = (ext.get("kgqr") or {}) if isinstance(ext, dict) else {}
    if not isinstance(given, dict):
        raise RewriteRequestError(400, "parsing_exception", "ext.kgqr must be an object")
    options = dict(given)
    if "kgqr.strategy" in query_params:
        options["strategy"] = query_params["kgqr.strategy"]
    if "kgqr.explain" in query_params:
        options["explain"] = query_params["kgqr.explain"]
    given = options.get("params") or {}
    if not isinstance(given, dict):
        raise RewriteRequestError(400, "parsing_exception", "ext.kgqr.params must be an object")
    params = dict(given)
    for key, value in query_params.items():
        if key.startswith("kgqr.param."):
            params[key.removeprefix("kgqr.param.")] = value
        elif key.startswith("kgqr.") and key not in URL_OPTIONS:
            # A misspelt knob (`kgqr.knn.k` for `kgqr.param.knn.k`) would else do nothing.
            raise RewriteRequestError(
                400,
                "illegal_argument_exception",
                f"unknown kgqr URL parameter [{key}]: use kgqr.strategy, kgqr.explain or "
                "kgqr.param.NAME",
            )
    options["params"] = params
    return options


def strip_kgqr(body: dict[str, Any]) -> dict[str, Any]:
    """The body without kgqr's ext object, as OpenSearch must receive it."""
    ext = body.get("ext")
    if not isinstance(ext, dict) or "kgqr" not in ext:
        return body
    rest = {k: v for k, v in ext.items() if k != "kgqr"}
    cleaned = {k: v for k, v in body.items() if k != "ext"}
    if rest:
        cleaned["ext"] = rest
    return cleaned


URL_PAGING = ("from", "size")


def with_url_paging(query_params: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    """The body with the URL's `from` / `size` in it. OpenSearch reads these from the URL
    over the body's; kgqr builds its own body for a rewritten search (a hybrid query pages
    through `pagination_depth`), so they must be in the body, not left in the URL."""
    given = {name: query_params[name] for name in URL_PAGING if name in query_params}
    if not given:
        return body
    paged = dict(body)
    for name, value in given.items():
        try:
            number = int(value)
        except ValueError:
            raise RewriteRequestError(
                400, "illegal_argument_exception", f"[{name}] must be a whole number: [{value}]"
            ) from None
        if number < 0:
            raise RewriteRequestError(
                400, "illegal_argument_exception", f"[{name}] must not be negative: [{value}]"
            )
        paged[name] = number
    return paged


def plan_search(
    index: str, query_params: dict[str, str], body: dict[str, Any], default_strategy: str | None
) -> SearchPlan | None:
    """The rewrite to do, or None to pass the search through (after strip_kgqr)."""
    options = _strategy_options(query_params, body)
    strategy = options.get("strategy", default_strategy)
    strategy = ALIASES.get(strategy, strategy) if isinstance(strategy, str) else strategy
    if strategy is not None and strategy not in STRATEGIES:
        raise RewriteRequestError(
            400,
            "illegal_argument_exception",
            f"unknown kgqr strategy [{strategy}]; valid strategies: {', '.join(STRATEGIES)}",
        )
    declared = STRATEGIES[strategy].params if strategy is not None else ALL_PARAMS
    given = request_params(declared, options["params"])
    kb = kb_of_documents_index(index)
    if strategy is None or kb is None or "scroll" in query_params:
        return None
    parsed = parse_query(body.get("query"))
    if parsed is None:
        return None
    return SearchPlan(
        index,
        kb,
        strategy,
        parsed,
        with_url_paging(query_params, strip_kgqr(body)),
        _truthy(options.get("explain", False)),
        given.values,
        given.warnings,
    )
