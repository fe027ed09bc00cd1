"""The search kgqr sends: a ``hybrid`` query with a BM25 clause over the expanded text, a
k-NN clause over the fused vector and, for a graph boost, a clause of boosted ids, run
through kgqr's normalisation pipeline, or fused here where the engine cannot (no
neural-search plugin, or a caller under document-level security). Built here and only
here: every hybrid search kgqr runs, a rewrite's, the plain query's for fusion, and the
initial hits a strategy reads, is `hybrid_body`'s.

The client's ``from``/``size``/``_source``/``aggs``/``sort`` and other top-level options
are kept; its query and filters (``bool.filter``/``must_not``) filter every clause. The
fields searched are the knowledge base's (`SearchFields`: kgqr's own, or an attached
index's field map).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from plugin.field_map import FieldMap
from plugin.schema import (
    HYBRID_BOOST_PIPELINE,
    HYBRID_PIPELINE,
    hybrid_pipeline,
    kb_of_documents_index,
)
from query_rewriter.engine import json_codec
from query_rewriter.engine.forwarding import json_answer
from query_rewriter.engine.gateway import EngineSession
from query_rewriter.engine.off_loop import off_the_loop_if_large
from query_rewriter.engine.original_facets import AGGREGATION_KEYS, without_aggregations
from query_rewriter.engine.query_text import ParsedQuery
from query_rewriter.engine.shard_health import with_worst_health

RRF_K = 60
# A fused ranking reads both rankings this deep (or to the end of the page, if deeper)
# whatever the page, so the fused order, and so each page, is the same however a client
# pages through it.
FUSION_DEPTH = 50
HYBRID_NOT_TOP_LEVEL = "hybrid query must be a top level query"


@dataclass(frozen=True)
class SearchFields:
    """The fields one search reads: words (multi_match names, boosts kept) and vectors."""

    text: tuple[str, ...]
    vector: str
    # The team chose `text` (`kgqr kb attach --text`): a caller's query may name others.
    chosen: bool = False
    # `text` holds every word a query naming no field reads (kgqr's own documents' title
    # and text); an attached index's suggested fields may leave some out.
    complete: bool = True

    @classmethod
    def of(cls, fields: FieldMap, named: tuple[str, ...] = ()) -> SearchFields:
        """The map's fields; an attached index that follows the caller's fields searches
        those the caller's query `named` (the team's own queries say where its words are)."""
        text = tuple(fields.boosted_text_fields())
        if fields.follow_query_fields and named and "*" not in named:
            text = named
        attached = kb_of_documents_index(fields.index) is None
        chosen = not fields.follow_query_fields and attached
        return cls(text, fields.vector_field or "", chosen, complete=not attached)


OWN_FIELDS = SearchFields.of(FieldMap.own("own"))


@dataclass(frozen=True)
class HybridWeights:
    """How the hybrid's sub-queries are weighed: BM25's share as the request set it (None:
    the installed pipeline's, the settings' weights), the graph boost's configured weights,
    and the share a strategy gave its boost (None: the configured one)."""

    bm25: float | None
    boost_weights: tuple[float, float, float]
    boost_share: float | None = None


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


# The least score a match gets: the hybrid query leaves out a hit every sub-query scores 0
# (the total still counts it). Equal for every match, it changes no order.
MATCHED_AT_FLOOR = {"constant_score": {"filter": {"match_all": {}}, "boost": 1e-4}}


def _bool(must: dict[str, Any], parsed: ParsedQuery, added: Collection[str] = ()) -> dict[str, Any]:
    """`must` under the caller's filters, among their query's matches (and `added`)."""
    clause: dict[str, Any] = {"must": [must]}
    if within := parsed.within(added):
        clause["filter"] = within
    if parsed.must_not:
        clause["must_not"] = parsed.must_not
    return {"bool": clause} if len(clause) > 1 else must


def bm25_clause(text: str, parsed: ParsedQuery, fields: SearchFields) -> dict[str, Any]:
    lexical: dict[str, Any] = {
        "multi_match": {"query": text, "fields": list(fields.text), **parsed.fuzzy}
    }
    if parsed.named:
        # The caller's named clauses, optional and at no score: the ranking stays the
        # rewrite's, and each hit's `matched_queries` names the clauses it matches, as a
        # direct search's do (the engine reads them from anywhere in the query).
        at_no_score = {"bool": {"should": parsed.named, "boost": 0}}
        lexical = {"bool": {"must": [lexical], "should": [at_no_score]}}
    if parsed.query is not None and _may_match_elsewhere(parsed, fields):
        # The caller's words may be in fields BM25 here does not read (the fields the team
        # chose for an attached index, or fields beside those suggested for it where the
        # query names none): their matches stay hits, at BM25's floor, so hits and the
        # total (the caller's own query's) agree.
        return {
            "bool": {
                "should": [lexical, MATCHED_AT_FLOOR],
                "filter": parsed.within(),
                **({"must_not": parsed.must_not} if parsed.must_not else {}),
            }
        }
    return _bool(lexical, parsed)


def _may_match_elsewhere(parsed: ParsedQuery, fields: SearchFields) -> bool:
    """Whether the caller's query may match words outside `fields.text`: it names fields
    BM25 here does not read, or none or `*` (the engine then reads every field, or the
    index's `index.query.default_field`) where those fields are not all the words."""
    named = {name.split("^")[0] for name in parsed.fields}
    if "*" in named:
        return not fields.complete
    if not fields.chosen:
        return False
    read = {name.split("^")[0] for name in fields.text}
    return bool(named - read)


def boost_clause(
    boosts: dict[str, float], parsed: ParsedQuery, added: Collection[str] = ()
) -> dict[str, Any]:
    """Graph-constrained boosting: the documents the knowledge graph links to the query,
    each scored by its weight (its DRF similarity). As its own hybrid sub-query it is
    normalised like the others, so its pipeline weight says how much the graph counts.
    Documents are named by `_id`, which every index has (the graph is keyed by it).
    Of the boosted documents the caller's query does not match, only `added` are added."""
    should = [
        {"constant_score": {"filter": {"ids": {"values": [doc_id]}}, "boost": round(weight, 4)}}
        for doc_id, weight in boosts.items()
    ]
    return _bool({"bool": {"should": should, "minimum_should_match": 1}}, parsed, added)


def knn_clause(
    vector: np.ndarray, k: int, parsed: ParsedQuery, fields: SearchFields
) -> dict[str, Any]:
    # Rounded as Python's round(x, 6) rounds a float32's value (the same on 2M values), at
    # a twentieth of its cost.
    rounded = np.round(np.asarray(vector, dtype=np.float64), 6).tolist()
    knn: dict[str, Any] = {"vector": rounded, "k": k}
    # A vector query's own matches are this clause's: its filters alone apply.
    within = parsed.within() if parsed.vector is None else list(parsed.filters)
    if within or parsed.must_not:
        knn["filter"] = {"bool": {"filter": within, "must_not": parsed.must_not}}
    return {"knn": {fields.vector: knn}}


def graph_adds(client_body: dict[str, Any], parsed: ParsedQuery, weights: HybridWeights) -> bool:
    """Whether the graph's linked documents may join the caller's matches: not under
    aggregations (its facets describe the hits), a query that demands more than a word,
    or a graph given no weight (`graph.weight=0` leaves the plain ranking as it was)."""
    aggregates = any(key in client_body for key in AGGREGATION_KEYS)
    share = weights.boost_share if weights.boost_share is not None else weights.boost_weights[2]
    return not aggregates and parsed.demands is None and share != 0


def hybrid_body(
    client_body: dict[str, Any],
    parsed: ParsedQuery,
    expanded_text: str,
    vector: np.ndarray,
    k: int,
    weights: HybridWeights,
    boosts: dict[str, float] | None = None,
    deep: bool = False,
    fields: SearchFields | None = None,
    added: Collection[str] = (),
    vector_scores: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The client's body with its query replaced by the hybrid query, weighed; `deep`:
    read from the top to FUSION_DEPTH at least, for a ranking fused before its page is cut
    (search/plain_fusion.py). `fields`: kgqr's own documents' unless given. `added`: the
    documents the graph adds to the caller's matches (graph_adds). `vector_scores`: the
    vector side of an index without a vector field, from kgqr's side index
    (search/side_vectors.py), scored like the graph's boosts and never adding a match."""
    fields = fields or OWN_FIELDS
    body = {key: value for key, value in client_body.items() if key not in ("query", "ext")}
    if deep:
        start, size = int(body.get("from", 0)), int(body.get("size", 10))
        body = {**body, "from": 0, "size": page_depth(start + size, FUSION_DEPTH)}
    size = int(body.get("size", 10))
    start = int(body.get("from", 0))
    # A vector query has no words (k-NN and the graph only); an attached index without
    # vectors has no k-NN side (BM25 and the graph only).
    queries = [bm25_clause(expanded_text, parsed, fields)] if parsed.vector is None else []
    if fields.vector:  # a vector query's own k: its matches are its k nearest
        queries.append(knn_clause(vector, parsed.vector_k or max(k, size), parsed, fields))
    elif vector_scores is not None:
        queries.append(boost_clause(vector_scores, parsed))
    hybrid: dict[str, Any] = {"queries": queries}
    positive = {doc_id: w for doc_id, w in (boosts or {}).items() if w > 0}
    if positive:
        hybrid["queries"].append(boost_clause(positive, parsed, added))
    # Pages read each sub-query equally deep, so min-max normalisation sees the same
    # scores and pages join up: without it the engine reads from + size per sub-query,
    # and the top 5 of a size-5 search is not the top 5 of a size-20 one.
    hybrid["pagination_depth"] = page_depth(start + size, k)
    body["query"] = {"hybrid": hybrid}
    both = parsed.vector is None and (bool(fields.vector) or vector_scores is not None)
    body = _weighted(body, weights) if both else _weighted_one_side(body, weights)
    return _highlighting_the_callers_query(body, client_body.get("query"))


# The engine's default `index.max_result_window`, which a hybrid query's depth may not pass.
DEFAULT_RESULT_WINDOW = 10_000


def page_depth(end: int, block: int) -> int:
    """How deep a page ending at hit `end` reads each ranking: `block` for every page within
    the first `block` hits, else the next multiple of it. Reading `from + size` deep past
    the first block, each further page was ranked over another set (a hit shown on two
    pages, another on none); now pages agree within each block of `block` hits. Never
    rounded past the engine's default window (the engine refuses a depth beyond an
    index's window: a page the caller's own search may read would fall back), so the last
    block's pages read to the window alike; an index whose window is lower refuses a page
    in its last block, which then runs as sent."""
    if end <= block:
        return block
    return max(end, min(block * -(-end // block), DEFAULT_RESULT_WINDOW))


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


def _weighted(body: dict[str, Any], weights: HybridWeights) -> dict[str, Any]:
    """The hybrid body with BM25's share (k-NN gets the rest, a graph boost keeps its
    configured share, or the strategy's) as an inline search pipeline; unchanged without
    either, so the named pipeline (the settings' weights) applies."""
    bm25, boost_weights, boost_share = weights.bm25, weights.boost_weights, weights.boost_share
    queries = body["query"]["hybrid"]["queries"]
    if len(queries) < 3:
        boost_share = None
    if bm25 is None and boost_share is None:
        return body
    if bm25 is None:
        bm25 = boost_weights[0] / (boost_weights[0] + boost_weights[1])
    boost = boost_weights[2] / sum(boost_weights) if len(queries) == 3 else 0.0
    boost = boost if boost_share is None else boost_share
    shares = (bm25 * (1 - boost), (1 - bm25) * (1 - boost), boost)[: len(queries)]
    return {**body, "search_pipeline": hybrid_pipeline(shares)}


def _weighted_one_side(body: dict[str, Any], weights: HybridWeights) -> dict[str, Any]:
    """A hybrid of one ranking (BM25 without vectors, k-NN for a vector query) and the
    graph boost, always weighed inline (the installed pipelines weigh both sides): the
    boost keeps its share, the ranking the rest."""
    queries = body["query"]["hybrid"]["queries"]
    boost = 0.0
    if len(queries) == 2:
        configured = weights.boost_weights[2] / sum(weights.boost_weights)
        boost = configured if weights.boost_share is None else weights.boost_share
    return {**body, "search_pipeline": hybrid_pipeline((1 - boost, boost)[: len(queries)])}


@dataclass(frozen=True)
class HybridAnswers:
    """The engine's answers to one rewritten search: the hybrid ranking and how it was
    fused, the original query's totals and facets, and the plain query's hybrid ranking
    where fusion asked for it."""

    ranked: httpx.Response
    fusion: str
    facets: httpx.Response
    plain: httpx.Response | None


async def rewritten_search(
    session: EngineSession,
    index: str,
    ranked: dict[str, Any],
    plain: dict[str, Any] | None,
    facets: dict[str, Any],
    params: dict[str, str],
    pipelines: bool,
) -> HybridAnswers:
    """The requests of one rewritten search, at once: the `ranked` hybrid body, the
    `plain` one (if any), and the caller's own query for its totals and facets (`facets`,
    sent with `params` less the paging its size 0 replaces)."""
    facet_params = {k: v for k, v in params.items() if k not in ("from", "size")}
    (answer, fusion), facet_answer, plain_answer = await asyncio.gather(
        hybrid_search(session, index, ranked, params, pipelines),
        session.send("POST", f"/{index}/_search", json=facets, params=facet_params),
        _plain_ranking(session, index, plain, params, pipelines),
    )
    return HybridAnswers(answer, fusion, facet_answer, plain_answer)


async def _plain_ranking(
    session: EngineSession,
    index: str,
    body: dict[str, Any] | None,
    params: dict[str, str],
    pipelines: bool,
) -> httpx.Response | None:
    if body is None:
        return None
    answer, _ = await hybrid_search(session, index, body, params, pipelines)
    return answer


async def hybrid_search(
    session: EngineSession,
    index: str,
    body: dict[str, Any],
    query_params: dict[str, str],
    pipelines: bool,
) -> tuple[httpx.Response, str]:
    """The hybrid body (its aggregations dropped: the original query's answer them) through
    the engine's pipeline where it has one (`pipelines`), else fused in kgqr; says which.

    A caller under document-level security cannot run a `hybrid` query on OpenSearch 2.19:
    the security plugin wraps the query in its filter, and neural-search refuses a hybrid
    query that is not top-level (neural-search issue 1303). For such a caller the same
    sub-queries are fused in kgqr, so the rewrite still applies."""
    params = search_params(query_params, body)
    body = without_aggregations(body)
    if not pipelines:
        return await _client_side_hybrid(session, index, body, params), "client"
    upstream = await session.send("POST", f"/{index}/_search", json=body, params=params)
    if upstream.status_code == 400 and HYBRID_NOT_TOP_LEVEL in upstream.text:
        fused = await _client_side_hybrid(session, index, body, params)
        return fused, "client (the engine refused a hybrid query under document-level security)"
    return upstream, "pipeline"


def rrf_fuse(
    rankings: list[list[dict[str, Any]]], size: int, start: int = 0
) -> list[dict[str, Any]]:
    """Hits ordered by sum of 1 / (RRF_K + rank) over the rankings; _score is that sum.
    A hit explained (the search's `explain: true`) is explained as that sum of the
    rankings' own explanations: its first ranking's alone did not add up to its score."""
    scores: dict[str, float] = {}
    first_seen: dict[str, dict[str, Any]] = {}
    parts: dict[str, list[dict[str, Any]]] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            key = f"{hit['_index']}/{hit['_id']}"
            scores[key] = scores.get(key, 0.0) + 1.0 / (RRF_K + rank)
            first_seen.setdefault(key, hit)
            if "_explanation" in hit:
                part = f"1/({RRF_K} + rank {rank}) of a ranking where it scored"
                parts.setdefault(key, []).append({"value": round(1.0 / (RRF_K + rank), 6),
                    "description": part, "details": [hit["_explanation"]]})  # fmt: skip
    ordered = sorted(scores, key=lambda key: -scores[key])[start : start + size]
    fused = []
    for key in ordered:
        hit = {**first_seen[key], "_score": round(scores[key], 6)}
        if key in parts:
            hit["_explanation"] = {"value": hit["_score"], "details": parts[key],
                                   "description": "reciprocal rank fusion, by kgqr"}  # fmt: skip
        fused.append(hit)
    return fused


async def _client_side_hybrid(
    session: EngineSession, index: str, body: dict[str, Any], params: dict[str, str]
) -> httpx.Response:
    """Without the neural-search plugin: each sub-query (BM25, k-NN, graph boost) run as its
    own search and fused by reciprocal rank fusion (RRF, k = 60), answered as one search
    would be. RRF reads ranks only: the hybrid weights (`hybrid.bm25`) do not apply."""
    queries = body["query"]["hybrid"]["queries"]
    size, start = int(body.get("size", 10)), int(body.get("from", 0))
    depth = int(body["query"]["hybrid"]["pagination_depth"])  # hybrid_body's
    params = {k: v for k, v in params.items() if k != "search_pipeline"}

    async def run(query: dict[str, Any]) -> httpx.Response:
        sub = {
            **{k: v for k, v in body.items() if k not in ("query", "from", "search_pipeline")},
            "query": query,
            "size": depth,
        }
        return await session.send("POST", f"/{index}/_search", json=sub, params=params)

    responses = await asyncio.gather(*(run(query) for query in queries))
    for response in responses:
        if response.status_code >= 400:
            return response

    def fused_answer() -> httpx.Response:
        answers = [json_codec.loads(response.content) for response in responses]
        merged = with_worst_health(answers[0], *answers[1:])  # read here, for this answer alone
        fused = rrf_fuse([answer["hits"]["hits"] for answer in answers], size, start)
        merged["hits"]["hits"] = fused
        merged["hits"]["max_score"] = fused[0]["_score"] if fused else None
        return json_answer(merged, *responses)

    # Each part is read `depth` hits deep: on a worker thread if that is large.
    return await off_the_loop_if_large(sum(len(r.content) for r in responses), fused_answer)
