"""Hybrid search without the neural-search plugin: run each sub-query (BM25, k-NN, graph
boost) as its own search and fuse them here by reciprocal rank fusion (RRF, k = 60).
RRF reads ranks only: the hybrid weights (`hybrid.bm25`) do not apply here."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import httpx

from query_rewriter.engine.forwarding import json_answer

RRF_K = 60


def rrf_fuse(
    rankings: list[list[dict[str, Any]]], size: int, start: int = 0
) -> list[dict[str, Any]]:
    """Hits ordered by sum of 1 / (RRF_K + rank) over the rankings; _score is that sum."""
    scores: dict[str, float] = {}
    first_seen: dict[str, dict[str, Any]] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            key = f"{hit['_index']}/{hit['_id']}"
            scores[key] = scores.get(key, 0.0) + 1.0 / (RRF_K + rank)
            first_seen.setdefault(key, hit)
    ordered = sorted(scores, key=lambda key: -scores[key])[start : start + size]
    return [{**first_seen[key], "_score": round(scores[key], 6)} for key in ordered]


async def client_side_hybrid(
    client: httpx.AsyncClient,
    index: str,
    body: dict[str, Any],
    params: dict[str, str],
    headers: dict[str, str],
) -> httpx.Response:
    """Run the hybrid body's sub-queries separately and answer as one search would."""
    queries = body["query"]["hybrid"]["queries"]
    size, start = int(body.get("size", 10)), int(body.get("from", 0))
    depth = int(body["query"]["hybrid"]["pagination_depth"])  # hybrid_query.hybrid_body's
    params = {k: v for k, v in params.items() if k != "search_pipeline"}

    async def run(query: dict[str, Any]) -> httpx.Response:
        sub = {
            **{k: v for k, v in body.items() if k not in ("query", "from", "search_pipeline")},
            "query": query,
            "size": depth,
        }
        return await client.post(f"/{index}/_search", json=sub, params=params, headers=headers)

    responses = await asyncio.gather(*(run(query) for query in queries))
    for response in responses:
        if response.status_code >= 400:
            return response
    merged = copy.deepcopy(responses[0].json())
    fused = rrf_fuse([r.json()["hits"]["hits"] for r in responses], size, start)
    merged["hits"]["hits"] = fused
    merged["hits"]["max_score"] = fused[0]["_score"] if fused else None
    return json_answer(merged, *responses)
