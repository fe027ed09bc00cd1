"""What `hits.total` and `aggregations` mean under a rewrite: those of the caller's query.

A rewritten search is a hybrid of BM25 over the expanded text and a k-NN clause, and the
k-NN side matches k documents whatever their relevance. Its total and facet counts would
describe the rewrite's candidate pool, not what the caller asked (a match with 2 hits
became a total of 8, and its terms buckets covered all 8). Search UIs show totals and
facets as "documents matching what I typed", so kgqr keeps that meaning: the rewrite
changes which hits come back and in what order; `hits.total` and `aggregations` are the
original query's, from a size-0 search run beside the rewritten one.
"""

from __future__ import annotations

from typing import Any

AGGREGATION_KEYS = ("aggs", "aggregations")
# Options that shape the returned hits only; a size-0 search for totals and facets needs
# none of them (and some, such as `rescore` or `collapse`, cost work or refuse size 0).
HIT_SHAPING_KEYS = {
    "from",
    "size",
    "sort",
    "_source",
    "highlight",
    "search_after",
    "docvalue_fields",
    "stored_fields",
    "fields",
    "script_fields",
    "explain",
    "version",
    "seq_no_primary_term",
    "rescore",
    "collapse",
    "track_scores",
    "suggest",
    "profile",
}


def facet_body(client_body: dict[str, Any]) -> dict[str, Any]:
    """The caller's search reduced to what decides its total and aggregations."""
    body = {k: v for k, v in client_body.items() if k not in HIT_SHAPING_KEYS}
    body["size"] = 0
    return body


def without_aggregations(body: dict[str, Any]) -> dict[str, Any]:
    """The rewritten body need not aggregate: its buckets would be replaced anyway."""
    return {k: v for k, v in body.items() if k not in AGGREGATION_KEYS}


def with_original_facets(rewritten: dict[str, Any], facets: dict[str, Any]) -> dict[str, Any]:
    """The rewritten answer's hits with the original query's total and aggregations."""
    merged = dict(rewritten)
    hits = dict(merged.get("hits") or {})
    total = (facets.get("hits") or {}).get("total")
    if total is None:  # `track_total_hits: false` asked for none
        hits.pop("total", None)
    else:
        hits["total"] = total
    merged["hits"] = hits
    merged.pop("aggregations", None)
    if "aggregations" in facets:
        merged["aggregations"] = facets["aggregations"]
    return merged
