"""Precomputing LLM rewrites before users ask: the queries to warm, and warming them.

A budgeted LLM strategy (KGQR_REWRITE_BUDGET_MS) serves its full rewrite only from the
cache; warming the most frequent queries of the query log fills that cache ahead of time.
Rewrites are cached per caller, so they are warmed through the proxy with the credentials
of the caller who will search (or anonymously on a cluster without security).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from kgqr_core.text_files import TEXT_ENCODING
from plugin.schema import QUERY_LOG_INDEX


def queries_from_file(path: Path) -> list[str]:
    """One query per line, or JSONL with a `query` (or `text`) field; blanks skipped,
    duplicates once, in file order. A line that starts as JSON but is not is a ValueError
    naming it."""
    queries = []
    for number, line in enumerate(path.read_text(encoding=TEXT_ENCODING).splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not JSON ({exc.msg})") from exc
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{number}: not a JSON object")
            line = str(record.get("query") or record.get("text") or "").strip()
        if line:
            queries.append(line)
    return list(dict.fromkeys(queries))


def frequent_logged_queries(opensearch: Any, kb: str, top: int) -> list[str]:
    """The `top` most frequent queries the query log holds for `kb` (kgqr's own account
    reads its own log)."""
    body = {
        "size": 0,
        "query": {"term": {"kb": kb}},
        "aggs": {"queries": {"terms": {"field": "query.raw", "size": top}}},
    }
    if not opensearch.indices.exists(index=QUERY_LOG_INDEX):
        return []
    found = opensearch.search(index=QUERY_LOG_INDEX, body=body)
    return [bucket["key"] for bucket in found["aggregations"]["queries"]["buckets"]]


@dataclass
class WarmReport:
    """How each query's rewrite stands after warming."""

    computed: int = 0  # rewritten now and cached
    already_cached: int = 0
    pending: int = 0  # the proxy is budgeted: queued in its background
    fell_back: list[str] = field(default_factory=list)  # queries whose rewrite failed


class WarmRefused(RuntimeError):
    """The proxy answered a warming search with an error (the caller may not search the
    index, the proxy is another service): the rest would be refused alike."""


def _own_words(text: str) -> dict[str, Any]:
    return {"match": {"text": text}}


def warm_queries(
    proxy_url: str,
    index: str,
    strategy: str,
    queries: list[str],
    headers: dict[str, str],
    on_query: Callable[[], None] = lambda: None,
    timeout_s: float = 900.0,
    query_of: Callable[[str], dict[str, Any]] = _own_words,
) -> WarmReport:
    """One explained search per query through the proxy, one at a time (the LLM serves one
    at a time anyway), as `query_of` writes it: the rewrite cached is the one a search in
    the same fields finds (an attached index's are its own, not kgqr's `text`)."""
    report = WarmReport()
    with httpx.Client(base_url=proxy_url, headers=headers, timeout=timeout_s) as client:
        for query in queries:
            response = client.post(
                f"/{index}/_search",
                params={"kgqr.strategy": strategy, "kgqr.explain": "true"},
                json={"query": query_of(query), "size": 1},
            )
            explain = _explain_of(response, index)
            if explain.get("fallback"):
                report.fell_back.append(query)
            elif explain.get("budget"):
                report.pending += 1
            elif explain.get("cached"):
                report.already_cached += 1
            else:
                report.computed += 1
            on_query()
    return report


def _explain_of(response: httpx.Response, index: str) -> dict[str, Any]:
    try:
        explain = response.json()["kgqr"] if response.status_code == 200 else None
    except (ValueError, KeyError, TypeError):
        explain = None
    if isinstance(explain, dict):
        return explain
    try:
        error = response.json()["error"]
        why = error.get("reason") or error.get("type") if isinstance(error, dict) else error
    except (ValueError, KeyError, TypeError, AttributeError):
        why = "no kgqr explain in the answer: is it kgqr's proxy?"
    hint = " (give the caller's credentials: --user)" if response.status_code in (401, 403) else ""
    raise WarmRefused(f"the proxy answered a search of {index} with {response.status_code}: "
                      f"{str(why)[:300]}{hint}")  # fmt: skip
