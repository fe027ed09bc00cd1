"""OpenSearch reads the KG strategies share: exact cosine for a set of ids, fetching
documents or triples by id, and which ids the caller may read — each one request, but for
readability checks larger than the engine's result window."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Protocol, TypeVar, runtime_checkable

import httpx
import numpy as np

from kgqr_core.field_evidence import Evidence, FieldEvidence, evidence_of, source_paths
from kgqr_core.result_window import window_in
from plugin.field_map import OWN_VECTOR_FIELD
from plugin.schema import triples_index
from query_rewriter.engine.hybrid_query import bm25_clause
from query_rewriter.engine.query_text import ParsedQuery
from query_rewriter.graph.store import Neighbours
from query_rewriter.strategies.context import StrategyContext, source_text
from query_rewriter.strategies.services import Search

T = TypeVar("T")
log = logging.getLogger("kgqr.proxy")


def _cosine_body(
    field: str, query_vector: np.ndarray, ids: set[str], top: int | None
) -> dict[str, Any]:
    script = {
        "source": "knn_score",
        "lang": "knn",
        "params": {
            "field": field,
            "query_value": [float(x) for x in query_vector],
            "space_type": "cosinesimil",
        },
    }
    return {
        "size": min(len(ids), top or len(ids)),
        "query": {"script_score": {"query": {"ids": {"values": sorted(ids)}}, "script": script}},
    }


def _cosine(hit: dict[str, Any]) -> float:
    """OpenSearch's cosinesimil score is (1 + cos) / 2; the cosine itself."""
    return 2.0 * float(hit["_score"]) - 1.0


async def exact_cosine(
    ctx: StrategyContext,
    index: str,
    query_vector: np.ndarray,
    ids: set[str],
    top: int | None = None,
) -> dict[str, float]:
    """Cosine of the query to each id's stored vector (exact, not approximate k-NN); with
    `top`, only the `top` most similar come back."""
    if not ids:
        return {}

    async def run(chunk: list[str]) -> list[dict[str, Any]]:
        body = _cosine_body(ctx.search_fields.vector, query_vector, set(chunk), top)
        return list(await ctx.search_ids(index, body))

    hits = _best(await within_window(index, sorted(ids), run), top)
    return {hit["_id"]: _cosine(hit) for hit in hits}


def _best(hits: list[dict[str, Any]], top: int | None) -> list[dict[str, Any]]:
    """Hits of several chunks as one search would rank them: by score, the `top` first."""
    ranked = sorted(hits, key=lambda hit: -float(hit["_score"] or 0.0))
    return ranked[:top] if top is not None else ranked


async def triple_cosine(
    ctx: StrategyContext, query_vector: np.ndarray, ids: set[str]
) -> dict[str, float]:
    """exact_cosine of triples (ids the caller's readable edges named), whose vectors are
    kgqr's own `vector` whatever the documents' field map says."""
    if not ids:
        return {}
    body = {**_cosine_body(OWN_VECTOR_FIELD, query_vector, ids, None), "_source": False}
    hits = (await ctx.triples.search(triples_index(ctx.kb), body))["hits"]["hits"]
    return {hit["_id"]: _cosine(hit) for hit in hits}


# A linked document's similarity when it shares no word with the query (BM25 only).
LINKED_FLOOR = 0.1


async def query_similarity(
    ctx: StrategyContext, query: str, ids: set[str], top: int | None = None
) -> dict[str, float]:
    """Each id's similarity to the query (the `top` most similar, with `top`): the cosine
    of its stored vector, or, in a knowledge base without vectors, BM25's: its score for the
    query over the best one's, above LINKED_FLOOR, which an id sharing no word with the
    query keeps (the graph linked it: a second hop rarely repeats the question's words).
    Only ids the caller may read score at all."""
    if ctx.search_fields.vector:
        return await exact_cosine(ctx, ctx.index, await ctx.query_vector(query), ids, top)
    if not ids:
        return {}
    words = bm25_clause(query, ParsedQuery(query), ctx.search_fields)

    async def run(chunk: list[str]) -> list[dict[str, Any]]:
        scored = {"bool": {"should": [words], "filter": [{"ids": {"values": chunk}}]}}
        body = {"size": min(len(chunk), top or len(chunk)), "query": scored}
        return list(await ctx.search_ids(ctx.index, body))

    hits = _best(await within_window(ctx.index, sorted(ids), run), top)
    best = max((float(hit["_score"] or 0.0) for hit in hits), default=0.0)
    share = 1.0 - LINKED_FLOOR
    return {
        hit["_id"]: LINKED_FLOOR + share * (float(hit["_score"] or 0.0) / best if best else 0.0)
        for hit in hits
    }


async def most_similar_documents(
    ctx: StrategyContext,
    index: str,
    query_vector: np.ndarray,
    ids: set[str],
    top: int,
    fields: list[str],
) -> dict[str, tuple[float, dict[str, Any]]]:
    """The `top` ids most similar to the query, each with its cosine and its `fields`: the
    scoring and the fetch in one request, since the KG stage's latency is round trips."""
    if not ids:
        return {}
    body = {**_cosine_body(ctx.search_fields.vector, query_vector, ids, top), "_source": fields}
    hits = (await ctx.opensearch.search(index, body))["hits"]["hits"]
    return {hit["_id"]: (_cosine(hit), hit["_source"]) for hit in hits}


async def by_ids(
    ctx: StrategyContext, index: str, ids: list[str], fields: list[str]
) -> dict[str, dict[str, Any]]:
    """`fields` of each of `ids` the caller may read, by id; none (`{}` each) when `fields`
    is empty (`_source: []` is the whole document to the engine, vectors included)."""
    if not ids:
        return {}
    hits = await ids_hits(ctx.opensearch, index, ids, {"_source": fields or False})
    return {hit["_id"]: hit.get("_source") or {} for hit in hits}


async def ids_hits(
    search: Search, index: str, ids: list[str], body: dict[str, Any]
) -> list[dict[str, Any]]:
    """The hits of an ids query naming `ids` (`body`: the rest of the search), within the
    index's result window."""

    async def run(chunk: list[str]) -> list[dict[str, Any]]:
        asked = {**body, "size": len(chunk), "query": {"ids": {"values": chunk}}}
        return list((await search.search(index, asked))["hits"]["hits"])

    return await within_window(index, ids, run)


# The result windows attached indices' searches were refused by, by index: asked within
# them from then on, rather than refused once per lookup.
_windows: dict[str, int] = {}


async def within_window(
    index: str, ids: list[str], run: Callable[[list[str]], Awaitable[list[dict[str, Any]]]]
) -> list[dict[str, Any]]:
    """`run`'s hits for `ids`, asking for all of them at once, or in chunks as large as the
    index's result window where the engine refuses more (it names the window): a team's
    window of 500 refused the lookups of a rewrite whose evidence held more, and it fell
    back. The hits are each chunk's, in turn."""
    known = _windows.get(index)
    if known is not None and known < len(ids):
        try:
            return await _in_chunks(ids, known, run)
        except httpx.HTTPStatusError as exc:
            if window_in(exc.response.text) is None:
                raise
            _windows.pop(index, None)  # lowered again since: learnt afresh below (a
            # concurrent lookup may have forgotten it first)
    try:
        return await run(ids)
    except httpx.HTTPStatusError as exc:
        refused = window_in(exc.response.text)
        if refused is None or refused >= len(ids):
            raise
    _windows[index] = max(1, refused)
    return await _in_chunks(ids, _windows[index], run)


async def _in_chunks(
    ids: list[str], size: int, run: Callable[[list[str]], Awaitable[list[dict[str, Any]]]]
) -> list[dict[str, Any]]:
    hits: list[dict[str, Any]] = []
    for at in range(0, len(ids), size):
        hits += await run(ids[at : at + size])
    return hits


# The engine's default index.max_result_window: an ids query asks for every id it names.
IDS_PER_QUERY = 10_000
CHECKS_AT_ONCE = 4  # ids queries one readability check keeps in flight
# How deep a triple search may go to find k readable triples for a caller from whom
# document-level security hides many: bounded, like every search kgqr makes for a caller.
MAX_TRIPLE_DEPTH = 1_000


async def readable_ids(
    ctx: StrategyContext, index: str, evidence: Collection[Evidence]
) -> set[Evidence]:
    """usable_among, through the strategy's search."""
    return await usable_among(ctx.opensearch, index, evidence)


async def usable_among(search: Search, index: str, evidence: Collection[Evidence]) -> set[Evidence]:
    """What of `evidence` the caller may use: the ids they may read (readable_among) and
    the field evidence their own fetch shows (shown_evidence)."""
    ids = {item for item in evidence if isinstance(item, str)}
    gates = {item for item in evidence if isinstance(item, FieldEvidence)}
    readable, shown = await asyncio.gather(
        readable_among(search, index, ids), shown_evidence(search, index, gates)
    )
    return {*readable, *shown}


def id_chunks(ids: Collection[str]) -> list[list[str]]:
    """`ids` in order, in chunks one ids query can name."""
    ordered = sorted(ids)
    return [ordered[at : at + IDS_PER_QUERY] for at in range(0, len(ordered), IDS_PER_QUERY)]


async def readable_among(search: Search, index: str, ids: Collection[str]) -> set[str]:
    """The ids the caller may read, asked with the caller's credentials, which
    document-level security filters like any search of theirs. Each chunk of
    IDS_PER_QUERY is counted first: a caller who may read all of it (most callers) costs
    one count, and only a chunk with hidden ids is fetched. (These probes say what may be
    read; they are not what a rewrite shows: search/evidence.py leaves them out.)"""
    slots = asyncio.Semaphore(CHECKS_AT_ONCE)
    # Which indices answered: an alias attached over one index may name more since. An id
    # is then two documents, the count may hold one twice in place of a hidden one, and
    # the graph's edges were read from one of them: nothing is taken as readable.
    indices = {"terms": {"field": "_index", "size": 2}}

    async def readable(chunk: list[str]) -> set[str]:
        query = {"ids": {"values": chunk}}
        async with slots:
            counted = await search.search(
                index,
                {"size": 0, "track_total_hits": True, "query": query, "aggs": {"i": indices}},
            )
            if len(counted["aggregations"]["i"]["buckets"]) > 1:
                tell_once(f"{index} names several indices: its graph evidence is not used")
                return set()
            if counted["hits"]["total"]["value"] == len(chunk):
                return set(chunk)
            return {hit["_id"] for hit in await ids_hits(search, index, chunk, {"_source": False})}

    return set().union(*await asyncio.gather(*map(readable, id_chunks(ids))))


_told: set[str] = set()


def tell_once(warning: str) -> None:
    """Log a warning a search finds once per process: every search would find it again."""
    if warning not in _told:
        _told.add(warning)
        log.warning(warning)


@runtime_checkable
class FieldEvidenceRecorder(Protocol):
    """A search endpoint that keeps the field evidence a rewrite used (search/evidence.py):
    a cached rewrite is served again only while the caller's fetch still shows it."""

    def note_shown(self, shown: Collection[FieldEvidence]) -> None: ...


async def shown_evidence(
    search: Search, index: str, gates: Collection[FieldEvidence]
) -> set[FieldEvidence]:
    """The field evidence the caller's own fetch of each document shows. Field-level
    security hides a field, masking changes its values, and a document changed since its
    graph was read shows other ones: each leaves the edges read from them unusable (one
    fetch of the fields per IDS_PER_QUERY documents)."""
    if not gates:
        return set()
    fields = source_paths({field for gate in gates for field in gate.fields})
    slots = asyncio.Semaphore(CHECKS_AT_ONCE)

    async def fetch(chunk: list[str]) -> dict[str, dict[str, Any]]:
        async with slots:
            hits = await ids_hits(search, index, chunk, {"_source": fields})
        return {hit["_id"]: hit.get("_source") or {} for hit in hits}

    shown: dict[str, dict[str, Any]] = {}
    for found in await asyncio.gather(*map(fetch, id_chunks({g.document for g in gates}))):
        shown.update(found)
    passed = {gate for gate in gates if gate.shown_in(shown.get(gate.document))}
    if isinstance(search, FieldEvidenceRecorder):
        search.note_shown(passed)
    return passed


TRIPLE_EVIDENCE_FIELDS = ("passage_id", "field_evidence")


async def without_hidden_fields(ctx: StrategyContext, hood: Neighbours) -> Neighbours:
    """The neighbourhood less the edges read from fields the caller's fetch does not show.
    For a strategy that checks the documents it reaches itself (by scoring them as the
    caller), and so reads nothing here for a graph with no edge read from fields."""
    gates = hood.field_evidence()
    if not gates:
        return hood
    with ctx.timer.stage("readable"):
        return hood.without(gates - await shown_evidence(ctx.opensearch, ctx.index, gates))


def triple_evidence(source: dict[str, Any]) -> Evidence | None:
    """What a triples index entry needs a caller to read: the fields it was read from
    (an attached index's), else its passage."""
    return evidence_of(source.get("field_evidence") or source.get("passage_id"))


async def with_readable_passage(
    ctx: StrategyContext, items: list[T], evidence_of_item: Callable[[T], Evidence | None]
) -> list[T]:
    """The items (triples, triple edges) whose evidence the caller may read, in order. A
    triple states what its passage says, so it reaches a prompt, a path or an explain only
    with that permission, whatever the triples index's own roles allow."""
    evidence = {found for item in items if (found := evidence_of_item(item))}
    allowed = await readable_ids(ctx, ctx.index, evidence)
    return [item for item in items if evidence_of_item(item) in allowed]


async def nearest_readable_triples(
    ctx: StrategyContext, query_vector: np.ndarray, k: int, fields: list[str]
) -> list[dict[str, Any]]:
    """The k triples nearest the query (TTR vectors) among those whose source passage the
    caller may read, as the engine's hits. A triple states what its passage says; cut
    before the check, a hidden passage's triple among the k left a shorter list, which
    told of it. The search goes deeper only while hidden ones fill its top, so a caller
    who may read them all gets exactly the first search's k."""
    wanted = sorted({*fields, *TRIPLE_EVIDENCE_FIELDS})
    vector = [float(x) for x in query_vector]

    def knn(depth: int) -> dict[str, Any]:
        return {"size": depth, "_source": wanted,
                "query": {"knn": {"vector": {"vector": vector, "k": depth}}}}  # fmt: skip

    return await readable_triple_hits(ctx, k, knn)


async def readable_triple_hits(
    ctx: StrategyContext, want: int, body_at: Callable[[int], dict[str, Any]]
) -> list[dict[str, Any]]:
    """The first `want` hits of a triples search (`body_at(depth)`) whose source the
    caller may read: deeper while hidden ones fill its top (a list cut before the check
    came out short where a hidden passage's triple ranked, which told of it). None for a
    caller not shown the text they were read from (strategies/text_facts.py)."""
    if not ctx.text_facts:
        return []
    index = triples_index(ctx.kb)
    depth = want
    while True:
        hits: list[dict[str, Any]] = (await ctx.triples.search(index, body_at(depth)))["hits"][
            "hits"
        ]
        readable = await with_readable_passage(ctx, hits, lambda h: triple_evidence(h["_source"]))
        if len(readable) >= want or len(hits) < depth or depth >= MAX_TRIPLE_DEPTH:
            return readable[:want]
        depth = min(4 * depth, MAX_TRIPLE_DEPTH)


async def titles_as_read(ctx: StrategyContext, index: str, ids: set[str]) -> dict[str, str]:
    """The titles of `ids` as the caller's own fetch returns them: field-level security
    may hide or mask `title`, and one the fetch lacks is named by its id, saying so."""
    title = ctx.title_field
    found = await by_ids(ctx, index, sorted(ids), [title] if title else [])
    return {
        node: text if (text := source_text(source, title)) else f"{node} (no title you may read)"
        for node, source in found.items()
    }
