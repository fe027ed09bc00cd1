"""What `hits.total` and `aggregations` mean under a rewrite: the documents a client can
page through, counted by the caller's own query.

A rewritten search is a hybrid of BM25 over the expanded text and a k-NN clause; both run
among the caller's query's matches (query_text.py), so the rewrite changes the order of
those documents. Its own total would count the candidate pool instead, so the total and
facets come from a size-0 search of the caller's query run beside the rewritten one. The
graph may add documents it links to the query (unless the search aggregates, or its query
demands more than a word): that size-0 search then counts them too, so `hits.total` is
the number of documents the rewritten search can return (kgqr once answered a total of 2
above five hits, and an app paging by the total could not reach the rest). One gap: a
document the caller's query matches only in fields the rewrite's BM25 side does not search
(a query_string on `*`) is counted, but reached only through the k-NN side.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from query_rewriter.engine.query_text import ParsedQuery
from query_rewriter.engine.shard_health import with_worst_health

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


def facet_body(
    client_body: dict[str, Any], parsed: ParsedQuery | None = None, added: Collection[str] = ()
) -> dict[str, Any]:
    """The caller's search reduced to what decides its total and aggregations; with
    `added` (documents the graph adds, under the caller's filters), counting those too."""
    body = {k: v for k, v in client_body.items() if k not in HIT_SHAPING_KEYS}
    body["size"] = 0
    if added and parsed is not None and parsed.query is not None:
        counted: dict[str, Any] = {"filter": parsed.within(added)}
        if parsed.must_not:
            counted["must_not"] = parsed.must_not
        body["query"] = {"bool": counted}
    return body


def without_aggregations(body: dict[str, Any]) -> dict[str, Any]:
    """The rewritten body need not aggregate: its buckets would be replaced anyway."""
    return {k: v for k, v in body.items() if k not in AGGREGATION_KEYS}


def with_original_facets(rewritten: dict[str, Any], facets: dict[str, Any]) -> dict[str, Any]:
    """The rewritten answer's hits with the original query's total and aggregations, and
    what went wrong in either: a total counted on shards that failed or ran out of time
    is partial, and the answer said all was well."""
    merged = with_worst_health(rewritten, facets)
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
