"""OpenSearch reads the KG strategies share: exact cosine for a set of ids, fetching
documents or triples by id, and which ids the caller may read — each one request, but for
readability checks larger than the engine's result window."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from query_rewriter.strategies.context import StrategyContext


async def _cosine_hits(
    ctx: StrategyContext,
    index: str,
    query_vector: np.ndarray,
    ids: set[str],
    top: int | None,
    fields: list[str] | None,
) -> list[dict[str, Any]]:
    script = {
        "source": "knn_score",
        "lang": "knn",
        "params": {
            "field": "vector",
            "query_value": [float(x) for x in query_vector],
            "space_type": "cosinesimil",
        },
    }
    body = {
        "size": min(len(ids), top or len(ids)),
        "_source": fields or False,
        "query": {"script_score": {"query": {"ids": {"values": sorted(ids)}}, "script": script}},
    }
    return list((await ctx.opensearch.search(index, body))["hits"]["hits"])


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
    hits = await _cosine_hits(ctx, index, query_vector, ids, top, None)
    return {hit["_id"]: _cosine(hit) for hit in hits}


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
    hits = await _cosine_hits(ctx, index, query_vector, ids, top, fields)
    return {hit["_id"]: (_cosine(hit), hit["_source"]) for hit in hits}


async def by_ids(
    ctx: StrategyContext, index: str, ids: list[str], fields: list[str]
) -> dict[str, dict[str, Any]]:
    if not ids:
        return {}
    body = {"size": len(ids), "_source": fields, "query": {"ids": {"values": ids}}}
    hits = (await ctx.opensearch.search(index, body))["hits"]["hits"]
    return {hit["_id"]: hit["_source"] for hit in hits}


# The engine's default index.max_result_window: an ids query asks for every id it names.
IDS_PER_QUERY = 10_000


async def readable_ids(ctx: StrategyContext, index: str, ids: set[str]) -> set[str]:
    """The ids the caller may read: ids queries sent with the caller's credentials, which
    document-level security filters like any search of theirs (one per IDS_PER_QUERY ids,
    concurrent: a walk's whole neighbourhood can name more than one query may return)."""
    ordered = sorted(ids)
    chunks = [ordered[at : at + IDS_PER_QUERY] for at in range(0, len(ordered), IDS_PER_QUERY)]

    async def readable(chunk: list[str]) -> set[str]:
        body = {"size": len(chunk), "_source": False, "query": {"ids": {"values": chunk}}}
        return {hit["_id"] for hit in (await ctx.opensearch.search(index, body))["hits"]["hits"]}

    return set().union(*await asyncio.gather(*map(readable, chunks)))


async def titles_as_read(ctx: StrategyContext, index: str, ids: set[str]) -> dict[str, str]:
    """The titles of `ids` as the caller's own fetch returns them: field-level security
    may hide or mask `title`, and one the fetch lacks is named by its id, saying so."""
    found = await by_ids(ctx, index, sorted(ids), ["title"])
    return {
        node: str(source["title"]) if source.get("title") else f"{node} (no title you may read)"
        for node, source in found.items()
    }
