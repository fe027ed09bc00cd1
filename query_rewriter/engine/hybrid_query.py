"""The search kgqr forwards: a ``hybrid`` query with a BM25 clause over the expanded text
and a k-NN clause over the fused vector, run through kgqr's normalisation pipeline.

The client's ``from``/``size``/``_source``/``aggs``/``sort`` and other top-level options
are kept; its filters (``bool.filter``/``must_not``) apply to both clauses.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from plugin.schema import HYBRID_BOOST_PIPELINE, HYBRID_PIPELINE, hybrid_pipeline
from query_rewriter.engine.query_text import ParsedQuery

TEXT_FIELDS = ["title^2", "text"]  # query_text.WORD_FIELDS: a caller's query on others filters
VECTOR_FIELD = "vector"


def fuse(query_vector: np.ndarray, context_vector: np.ndarray | None, alpha: float) -> np.ndarray:
    """KG-CQR Eq. 9: v = alpha * v_query + (1 - alpha) * v_context, renormalised."""
    if context_vector is None:
        return query_vector
    fused = alpha * query_vector + (1.0 - alpha) * context_vector
    norm = float(np.linalg.norm(fused))
    return fused / norm if norm > 0 else query_vector


def mean_vector(vectors: np.ndarray) -> np.ndarray | None:
    if len(vectors) == 0:
        return None
    mean = vectors.mean(axis=0)
    norm = float(np.linalg.norm(mean))
    return mean / norm if norm > 0 else None


def _bool(must: dict[str, Any], parsed: ParsedQuery) -> dict[str, Any]:
    clause: dict[str, Any] = {"must": [must]}
    if parsed.filters:
        clause["filter"] = parsed.filters
    if parsed.must_not:
        clause["must_not"] = parsed.must_not
    return {"bool": clause} if len(clause) > 1 else must


def bm25_clause(text: str, parsed: ParsedQuery) -> dict[str, Any]:
    lexical: dict[str, Any] = {
        "multi_match": {"query": text, "fields": TEXT_FIELDS, **parsed.fuzzy}
    }
    if parsed.named:
        # The caller's named clauses, optional and at no score: the ranking stays the
        # rewrite's, and each hit's `matched_queries` names the clauses it matches, as a
        # direct search's do (the engine reads them from anywhere in the query).
        at_no_score = {"bool": {"should": parsed.named, "boost": 0}}
        lexical = {"bool": {"must": [lexical], "should": [at_no_score]}}
    return _bool(lexical, parsed)


def boost_clause(boosts: dict[str, float], parsed: ParsedQuery) -> dict[str, Any]:
    """Graph-constrained boosting: the documents the knowledge graph links to the query,
    each scored by its weight (its DRF similarity). As its own hybrid sub-query it is
    normalised like the others, so its pipeline weight says how much the graph counts."""
    should = [
        {"constant_score": {"filter": {"term": {"id": doc_id}}, "boost": round(weight, 4)}}
        for doc_id, weight in boosts.items()
    ]
    return _bool({"bool": {"should": should, "minimum_should_match": 1}}, parsed)


def knn_clause(vector: np.ndarray, k: int, parsed: ParsedQuery) -> dict[str, Any]:
    knn: dict[str, Any] = {"vector": [round(float(x), 6) for x in vector], "k": k}
    if parsed.filters or parsed.must_not:
        knn["filter"] = {"bool": {"filter": parsed.filters, "must_not": parsed.must_not}}
    return {"knn": {VECTOR_FIELD: knn}}


def hybrid_body(
    client_body: dict[str, Any],
    parsed: ParsedQuery,
    expanded_text: str,
    vector: np.ndarray,
    k: int,
    boosts: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The client's body with its query replaced by the hybrid query."""
    body = {key: value for key, value in client_body.items() if key not in ("query", "ext")}
    size = int(body.get("size", 10))
    start = int(body.get("from", 0))
    hybrid: dict[str, Any] = {
        "queries": [bm25_clause(expanded_text, parsed), knn_clause(vector, max(k, size), parsed)]
    }
    positive = {doc_id: w for doc_id, w in (boosts or {}).items() if w > 0}
    if positive:
        hybrid["queries"].append(boost_clause(positive, parsed))
    # Every page of a search reads each sub-query equally deep, so min-max normalisation
    # sees the same scores and pages join up: without it the engine reads from + size
    # per sub-query, and the top 5 of a size-5 search is not the top 5 of a size-20 one.
    hybrid["pagination_depth"] = max(k, start + size)
    body["query"] = {"hybrid": hybrid}
    return _highlighting_the_callers_query(body, client_body.get("query"))


def _highlighting_the_callers_query(body: dict[str, Any], query: Any) -> dict[str, Any]:
    """Highlights of what the caller typed. The engine highlights a search's query, and a
    rewritten one's BM25 side holds the expansions too: with `prf`, nearly every word of a
    hit came back in <em>. A `highlight_query` of the caller's own query keeps the marks
    a direct search makes (one the caller gave is kept)."""
    highlight = body.get("highlight")
    if not isinstance(highlight, dict) or "highlight_query" in highlight or query is None:
        return body
    return {**body, "highlight": {**highlight, "highlight_query": query}}


def search_params(client_params: dict[str, str], body: dict[str, Any]) -> dict[str, str]:
    """The client's query-string parameters minus kgqr's own and the paging the body now
    holds (search_request.with_paging), plus the pipeline that matches the hybrid
    body's number of sub-queries. Never `request_cache`: neural-search 2.19 fails with a
    500 ("Cannot invoke SearchHit.score") on a hybrid answer read back from that cache."""
    params = {
        k: v
        for k, v in client_params.items()
        if not k.startswith("kgqr.") and k not in ("from", "size", "request_cache")
    }
    if "search_pipeline" not in body:  # else the request's own weights, inline
        queries = body["query"]["hybrid"]["queries"]
        params["search_pipeline"] = HYBRID_BOOST_PIPELINE if len(queries) == 3 else HYBRID_PIPELINE
    return params


def weighted(
    body: dict[str, Any],
    bm25: float | None,
    boost_weights: tuple[float, float, float],
    boost_share: float | None = None,
) -> dict[str, Any]:
    """The hybrid body with BM25's share `bm25` (k-NN gets the rest, a graph boost keeps
    its configured share, or `boost_share`) as an inline search pipeline; unchanged
    without either, so the named pipeline (the settings' weights) applies."""
    queries = body["query"]["hybrid"]["queries"]
    if len(queries) < 3:
        boost_share = None
    if bm25 is None and boost_share is None:
        return body
    if bm25 is None:
        bm25 = boost_weights[0] / (boost_weights[0] + boost_weights[1])
    boost = boost_weights[2] / sum(boost_weights) if len(queries) == 3 else 0.0
    boost = boost if boost_share is None else boost_share
    weights = (bm25 * (1 - boost), (1 - bm25) * (1 - boost), boost)[: len(queries)]
    return {**body, "search_pipeline": hybrid_pipeline(weights)}
