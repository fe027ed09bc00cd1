"""What KAR's hub cap costs and buys on a real graph: KG-stage latency against evidence recall.

For each judged question, KAR's entity parsing (the LLM call, cached in Redis after the
first run) and entity document retrieval run once; then relation propagation + DRF run
once per cap. Evidence recall is the share of a question's gold documents among what KAR
would show the LLM (entity documents + the neighbours DRF keeps). No generation call, so a
re-run costs seconds: this is how the default cap was chosen (see README, Measurements).
The baseline in the same run is the largest cap.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import redis.asyncio as aioredis
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_common import save
from kgqr_core import connections
from kgqr_core.embedder import get_embedder
from kgqr_core.llm import AsyncLlmClient
from kgqr_core.settings import get_settings
from plugin import kb_meta, schema
from plugin.kb_meta import DocumentStructure
from query_rewriter.engine.gateway import EngineSession, opensearch_http_client
from query_rewriter.graph.store import Neo4jGraph
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.knowledge.kar import KnowledgeAwareRewrite
from query_rewriter.strategies.knowledge.kar_stages import DocumentSimilarity, LlmEntityLinker
from workbench.evaluation.query_sets import load_query_set


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    settings = get_settings()
    caps = sorted({int(c) for c in args.caps.split(",")})
    queries = load_query_set(args.query_set, limit=args.limit)
    embedder = get_embedder(settings.embedder.model)

    async def embed(texts: list[str]) -> np.ndarray:
        return await asyncio.to_thread(embedder.encode, texts)

    meta = kb_meta.load(connections.opensearch_client(settings), args.kb)
    structure = meta.structure if meta else DocumentStructure()
    strategy = KnowledgeAwareRewrite()
    ms: dict[int, list[float]] = {cap: [] for cap in caps}
    recall: dict[int, list[float]] = {cap: [] for cap in caps}
    candidates: dict[int, list[int]] = {cap: [] for cap in caps}
    entity_recall: list[float] = []
    redis = aioredis.Redis.from_url(settings.redis.url)
    llm = AsyncLlmClient(settings, redis)
    async with (
        opensearch_http_client(settings) as http,
        connections.async_neo4j_driver(settings) as graph,
    ):
        for query in tqdm(queries, desc="questions", unit="q"):
            gold = {doc for doc, grade in query.judgments.items() if grade > 0}

            def context(cap: int) -> StrategyContext:
                return StrategyContext(
                    settings.replaced({"kar_hub_cap": cap}),
                    schema.documents_index(args.kb),
                    args.kb,
                    structure,
                    llm,
                    EngineSession(http, {}),
                    embed,
                    graph=Neo4jGraph(graph),
                )

            ctx = context(caps[-1])
            linker = LlmEntityLinker()
            matched = await linker.documents(await linker.parse(query.text, ctx), ctx)
            if gold:
                entity_recall.append(len(gold & {m.document.id for m in matched}) / len(gold))
            for cap in caps:
                ctx = context(cap)
                started = time.perf_counter()
                kept = await strategy.kept_neighbours(
                    query.text, matched, DocumentSimilarity(), ctx
                )
                ms[cap].append((time.perf_counter() - started) * 1000)
                shown = {m.document.id for m in matched} | {n.document.id for n in kept}
                recall[cap].append(len(gold & shown) / len(gold) if gold else 0.0)
                candidates[cap].append(len(kept))
    await llm.close()
    await redis.aclose()
    return {
        "entity_documents_recall": 100 * statistics.mean(entity_recall),
        "caps": {
            str(cap): {
                "propagate_drf_p50_ms": statistics.median(ms[cap]),
                "evidence_recall": 100 * statistics.mean(recall[cap]),
                "kept_mean": statistics.mean(candidates[cap]),
            }
            for cap in caps
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("query_set", help="KIND:PATH, e.g. musique:../shared/data/musique100")
    parser.add_argument("--kb", required=True)
    parser.add_argument("--caps", default="10,20,50", help="hub caps to compare")
    parser.add_argument("--limit", type=int, default=50)
    args = parser.parse_args()
    figures = asyncio.run(measure(args))
    print(
        "entity documents alone (the parse's entities, top-1 each): "
        f"recall {figures['entity_documents_recall']:.1f}"
    )
    caps = figures["caps"]
    baseline = caps[max(caps, key=int)]
    for cap, row in caps.items():
        print(
            f"cap {cap:>3}: propagate+DRF p50 {row['propagate_drf_p50_ms']:6.1f} ms "
            f"({row['propagate_drf_p50_ms'] / baseline['propagate_drf_p50_ms']:.2f}x), "
            f"evidence recall {row['evidence_recall']:.1f} "
            f"(vs {baseline['evidence_recall']:.1f})"
        )
    save("kar_hub_cap", {"kb": args.kb, "query_set": args.query_set, **figures})


if __name__ == "__main__":
    main()
