"""KAR's knowledge-graph stage without the LLM — entity document retrieval (k-NN top-1),
h-hop propagation in Neo4j (hub-capped), document-based relation filtering (exact cosine
in OpenSearch) — on a synthetic graph with 1M relations and a few hub nodes.

Documents carry random unit vectors (embedding 50k texts would take most of an hour on 2
cores and changes nothing for this stage's latency). Goal: p50 <= 30 ms. The baseline in
the same run is one plain k-NN query, the cheapest search the stage has to make.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_common import save
from bench.neo4j_relation_load import clear_graph
from ingest import graph_projection, graph_writer
from ingest.records import Document, Relation
from kgqr_core import connections
from kgqr_core.settings import get_settings
from plugin import installer, schema
from plugin.kb_meta import DocumentStructure
from query_rewriter.engine.gateway import EngineSession, opensearch_http_client
from query_rewriter.graph.copies import GraphSnapshots, SnapshotGraph
from query_rewriter.graph.in_memory import COUNT_RELATIONS
from query_rewriter.graph.projection import ProjectedGraph
from query_rewriter.graph.store import Neo4jGraph
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.knowledge.kar import KnowledgeAwareRewrite
from query_rewriter.strategies.knowledge.kar_stages import (
    DocumentSimilarity,
    Entity,
    LlmEntityLinker,
)
from query_rewriter.strategies.services import Graph

DIM = 384


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def build(settings: Any, kb: str, nodes: int, relations: int, hubs: int) -> np.ndarray:
    rng = np.random.default_rng(11)
    vectors = unit(rng, nodes)
    opensearch = connections.opensearch_client(settings)
    installer.install_opensearch(opensearch, DIM, settings.rewrite)
    index = schema.documents_index(kb)
    opensearch.indices.delete(index=index, ignore_unavailable=True)
    opensearch.indices.create(index=index, body={"settings": {"refresh_interval": "-1"}})
    started = time.perf_counter()
    for start in range(0, nodes, 2000):
        body: list[dict[str, Any]] = []
        for i in range(start, min(start + 2000, nodes)):
            body.append({"index": {"_index": index, "_id": str(i)}})
            body.append(
                {
                    "id": str(i),
                    "kb": kb,
                    "type": "paper",
                    "title": f"paper {i}",
                    "body": f"synthetic paper {i}",
                    "text": f"paper {i}",
                    "vector": vectors[i].tolist(),
                }
            )
        opensearch.bulk(body=body, timeout=300)
    opensearch.indices.put_settings(index=index, body={"refresh_interval": "1s"})
    opensearch.indices.refresh(index=index)
    opensearch.indices.forcemerge(index=index, max_num_segments=1, request_timeout=1200)
    print(f"indexed {nodes} documents in {time.perf_counter() - started:.0f} s")
    started = time.perf_counter()
    with connections.neo4j_driver(settings) as driver:
        installer.install_neo4j(driver)
        clear_graph(driver, kb)
        for start in range(0, nodes, 20_000):
            graph_writer.write_documents(
                driver,
                kb,
                [
                    Document(id=str(i), type="paper", title=f"paper {i}")
                    for i in range(start, min(start + 20_000, nodes))
                ],
            )
        write_relations(driver, kb, nodes, relations, hubs)
        print(f"wrote {relations:,} relations in {time.perf_counter() - started:.0f} s")
        copy_graph(settings, driver, opensearch, kb)
    return vectors


def write_relations(
    driver: Any, kb: str, nodes: int, relations: int, hubs: int, seed: int = 5
) -> None:
    """`relations` random citations between the `nodes` papers, 5% of them from one of the
    first `hubs`, so hubs reach degrees in the tens of thousands."""
    pyrng = random.Random(seed)
    written = 0
    while written < relations:
        batch = []
        for _ in range(min(20_000, relations - written)):
            source = pyrng.choice(range(hubs)) if pyrng.random() < 0.05 else pyrng.randrange(nodes)
            batch.append(
                Relation(source=str(source), type="cites", target=str(pyrng.randrange(nodes)))
            )
        graph_writer.write_relations(driver, kb, batch)
        written += len(batch)


def write_copy_only(settings: Any, opensearch: Any, kb: str, nodes: int, relations: int,
                    hubs: int) -> None:  # fmt: skip
    """The graph's copy in OpenSearch written straight from a random graph drawn as
    `write_relations` draws one, with no Neo4j behind it: Neo4j's single writer takes hours
    for tens of millions of relations on this machine, and what a search reads of the copy
    is the same documents either way (each node's first edges, in the order written)."""
    rng = np.random.default_rng(relations)
    started = time.perf_counter()
    hub = rng.random(relations) < 0.05
    sources = np.where(hub, rng.integers(0, hubs, relations), rng.integers(0, nodes, relations))
    targets = rng.integers(0, nodes, relations)
    ends = np.concatenate([sources, targets])  # each edge at both its ends, in written order
    others = np.concatenate([targets, sources])
    outgoing = np.concatenate([np.ones(relations, bool), np.zeros(relations, bool)])
    written = np.concatenate([np.arange(relations), np.arange(relations)])
    order = np.lexsort((written, ends))
    ends, others, outgoing = ends[order], others[order], outgoing[order]
    starts = np.searchsorted(ends, np.arange(nodes + 1))
    edges = settings.graph.projection_edges
    index = schema.graph_index(kb)
    opensearch.indices.delete(index=index, ignore_unavailable=True)
    graph_projection.create(opensearch, kb, edges, complete=False)
    opensearch.indices.put_settings(index=index, body={"refresh_interval": "-1"})
    for first in range(0, nodes, 5_000):
        body: list[dict[str, Any]] = []
        for node in range(first, min(first + 5_000, nodes)):
            kept = slice(starts[node], min(starts[node + 1], starts[node] + edges))
            linked = zip(others[kept].tolist(), outgoing[kept].tolist(), strict=True)
            body.append({"index": {"_index": index, "_id": str(node)}})
            body.append(graph_projection.node_document(
                str(node), "paper", f"paper {node}",
                [[str(other), "paper", "cites", bool(out), None] for other, out in linked],
            ))  # fmt: skip
        opensearch.bulk(body=body, timeout=300)
    opensearch.indices.put_settings(index=index, body={"refresh_interval": "1s"})
    opensearch.indices.forcemerge(index=index, max_num_segments=1, request_timeout=3600)
    opensearch.indices.put_mapping(
        index=index, body=schema.GraphCopyState(complete=True, edges=edges).as_mapping()
    )
    print(f"wrote the copy of {relations:,} relations on {nodes:,} nodes into OpenSearch "
          f"(no Neo4j) in {time.perf_counter() - started:.0f} s")  # fmt: skip


def relation_count(driver: Any, kb: str) -> int:
    records, _, _ = driver.execute_query(COUNT_RELATIONS, kb=kb)
    return int(records[0]["relations"])


def copy_graph(settings: Any, driver: Any, opensearch: Any, kb: str) -> None:
    """The graph's copy in OpenSearch, as `kgqr kb project` makes it (timed)."""
    started = time.perf_counter()
    written, _ = graph_projection.copy_graph(settings, driver, opensearch, kb)
    print(f"copied {written:,} nodes into OpenSearch in {time.perf_counter() - started:.0f} s")


async def measure(settings: Any, kb: str, vectors: np.ndarray, queries: int, hubs: int) -> dict:
    rng = np.random.default_rng(3)
    strategy = KnowledgeAwareRewrite()
    stage_ms, knn_ms = [], []
    per_stage: dict[str, list[float]] = {}
    async with (
        opensearch_http_client(settings) as http,
        connections.async_neo4j_driver(settings) as graph,
    ):
        gateway = EngineSession(http, {})
        for q in range(queries):
            # A query near a hub now and then, so hub capping is exercised.
            anchor = q % hubs if q % 5 == 0 else int(rng.integers(hubs, len(vectors)))
            query_vector = vectors[anchor] + 0.3 * unit(rng, 1)[0]
            query_vector /= np.linalg.norm(query_vector)
            entity_vectors = [query_vector, *unit(rng, 2)]

            async def embed(texts: list[str], pool: list = entity_vectors) -> np.ndarray:
                return np.asarray(pool[: len(texts)] if len(texts) > 1 else [pool[0]])

            ctx = StrategyContext(
                settings,
                schema.documents_index(kb),
                kb,
                DocumentStructure(types={"paper": []}),
                None,  # type: ignore[arg-type]
                gateway,
                embed,
                graph=Neo4jGraph(graph),
            )
            entities = [Entity("paper", f"e{i}", f"e{i}") for i in range(3)]
            started = time.perf_counter()
            matched = await LlmEntityLinker().documents(entities, ctx)
            kept = await strategy.kept_neighbours("q", matched, DocumentSimilarity(), ctx)
            stage_ms.append((time.perf_counter() - started) * 1000)
            for stage, ms in ctx.timer.stages_ms.items():
                per_stage.setdefault(stage, []).append(ms)
            assert kept, "the KG stage found no neighbours"
            started = time.perf_counter()
            body = {
                "size": 1,
                "_source": False,
                "query": {"knn": {"vector": {"vector": [float(x) for x in query_vector], "k": 1}}},
            }
            await gateway.search(schema.documents_index(kb), body)
            knn_ms.append((time.perf_counter() - started) * 1000)
    return {
        "p50_ms": statistics.median(stage_ms),
        "p95_ms": sorted(stage_ms)[int(0.95 * len(stage_ms))],
        "knn_p50_ms": statistics.median(knn_ms),
        "stage_p50_ms": {stage: statistics.median(ms) for stage, ms in per_stage.items()},
    }


@asynccontextmanager
async def graph_reads(settings: Any, source: str, http: Any) -> AsyncIterator[Graph]:
    """The graph as the proxy reads it: Neo4j on every search, the proxy's in-memory copy
    (loaded before the first timed search; the version check stays in the timing), or the
    copy in OpenSearch (`opensearch`: no in-memory copy, as for a graph above its cap)."""
    import redis.asyncio as aioredis

    async with connections.async_neo4j_driver(settings) as driver:
        if source == "neo4j":
            yield Neo4jGraph(driver)
            return
        if source == "opensearch":
            graph = settings.graph.model_copy(update={"snapshot_max_relations": 0})
            settings = settings.model_copy(update={"graph": graph})
        redis = aioredis.Redis.from_url(settings.redis.url)
        snapshots = GraphSnapshots(settings, redis)
        projection = ProjectedGraph(lambda: EngineSession(http, {}), 2.0)
        try:
            yield SnapshotGraph(driver, snapshots, projection)
        finally:
            await redis.aclose()


async def measure_graph(
    settings: Any, kb: str, vectors: np.ndarray, queries: int, source: str, name: str,
    documents_kb: str | None = None,
) -> dict:  # fmt: skip
    """A graph strategy (`name`: graph or graph_walk) end to end (its rewrite, then the
    hybrid search with its boosts) against `base` (the hybrid search alone) on the same
    queries, alternating: the added p50 is the issue's goal (<= 60 ms at 1M relations).
    `source`: where the graph is read (neo4j, or the proxy's in-memory copy)."""
    from query_rewriter.engine.hybrid_query import HybridWeights, hybrid_body, search_params
    from query_rewriter.engine.query_text import ParsedQuery
    from query_rewriter.strategies import STRATEGIES

    rng = np.random.default_rng(5)
    strategy = STRATEGIES[name]
    base_ms: list[float] = []
    graph_ms: list[float] = []
    per_stage: dict[str, list[float]] = {}
    index = schema.documents_index(documents_kb or kb)
    async with (
        opensearch_http_client(settings) as http,
        graph_reads(settings, source, http) as graph,
    ):
        gateway = EngineSession(http, {})
        copy_load_s = copy_rss_mb = None
        rss_at_start = rss_mb()
        if source == "snapshot":  # the copy is loaded (and timed) before timing
            assert isinstance(graph, SnapshotGraph)
            rss = rss_mb()
            started = time.perf_counter()
            await graph.snapshots.current(kb)
            await graph.snapshots.settle()
            copy_load_s = time.perf_counter() - started
            copy_rss_mb = rss_mb() - rss
            assert await graph.snapshots.current(kb) is not None, "the graph was not copied"

        async def hybrid(text: str, vector: np.ndarray, boosts: dict[str, float]) -> None:
            weights = HybridWeights(None, settings.rewrite.hybrid_boost_weights)
            # k as the proxy gives it (KGQR_REWRITE_KNN_K), the seed search's k too: until
            # 2026-11-28 this took 10, so `added` also counted a deeper k-NN than base's.
            k = settings.rewrite.knn_k
            body = hybrid_body({"size": 10}, ParsedQuery(text), text, vector, k, weights, boosts)
            await gateway.search(index, body, search_params({}, body))

        for q in range(queries + 5):  # the first five warm the caches and are not counted
            anchor = int(rng.integers(len(vectors)))
            vector = vectors[anchor] + 0.3 * unit(rng, 1)[0]
            vector /= np.linalg.norm(vector)
            text = f"paper {anchor}"

            async def embed(texts: list[str], v: np.ndarray = vector) -> np.ndarray:
                return np.asarray([v for _ in texts])

            started = time.perf_counter()
            await hybrid(text, vector, {})
            base = (time.perf_counter() - started) * 1000
            ctx = StrategyContext(
                settings, index, kb, DocumentStructure(types={"paper": []}),
                None,  # type: ignore[arg-type]
                gateway, embed, graph=graph,
            )  # fmt: skip
            started = time.perf_counter()
            rewrite = await strategy.rewrite(text, ctx)
            await hybrid(text, vector, rewrite.boost_ids)
            walked = (time.perf_counter() - started) * 1000
            if q >= 5:
                assert rewrite.details["graph_source"].startswith(source), rewrite.details
                base_ms.append(base)
                graph_ms.append(walked)
                for stage, ms in ctx.timer.stages_ms.items():
                    per_stage.setdefault(stage, []).append(ms)
    base_p50, graph_p50 = statistics.median(base_ms), statistics.median(graph_ms)
    return {
        "base_p50_ms": base_p50,
        "graph_p50_ms": graph_p50,
        "added_p50_ms": graph_p50 - base_p50,
        "ratio": graph_p50 / base_p50,
        "graph_p95_ms": sorted(graph_ms)[int(0.95 * len(graph_ms))],
        "stage_p50_ms": {stage: statistics.median(ms) for stage, ms in per_stage.items()},
        "copy_load_s": copy_load_s,
        "copy_rss_mb": copy_rss_mb,
        "rss_growth_mb": rss_mb() - rss_at_start,
    }


def rss_mb() -> float:
    """This process's resident memory now (the in-memory copy's cost is its growth)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def measure_copy_only(settings: Any, kb: str, args: argparse.Namespace) -> None:
    opensearch = connections.opensearch_client(settings)
    if not args.reuse:
        write_copy_only(settings, opensearch, kb, args.nodes, args.relations, args.hubs)
    # Index stats, not _cat/indices: that reads the cluster state, which kgqr's accounts
    # may not on a secured cluster.
    copy = opensearch.indices.stats(index=schema.graph_index(kb), metric="docs,store")["_all"]
    hub = opensearch.get(index=schema.graph_index(kb), id="0")["_source"]["edges"]["n"]
    vectors = unit(np.random.default_rng(11), 50_000)  # --documents-kb's, as build drew them
    measured = asyncio.run(
        measure_graph(settings, kb, vectors, args.queries, "opensearch", args.strategy,
                      documents_kb=args.documents_kb)
    )  # fmt: skip
    figures = {
        "nodes": args.nodes, "relations": args.relations, "strategy": args.strategy,
        "copy_only": True, "documents_kb": args.documents_kb,
        "copy_documents": copy["primaries"]["docs"]["count"],  # _cat's: no replicas
        "copy_store_mb": copy["total"]["store"]["size_in_bytes"] // 2**20,
        "hub_edges_kept": len(hub), "opensearch": measured,
    }  # fmt: skip
    report(args.relations, "opensearch", args.strategy, measured)
    save("graph_latency", figures)


def report(relations: int, source: str, strategy: str, measured: dict[str, Any]) -> None:
    print(
        f"{relations:,} relations, graph read from {source}: base p50 "
        f"{measured['base_p50_ms']:.1f} ms, {strategy} p50 {measured['graph_p50_ms']:.1f} ms:"
        f" +{measured['added_p50_ms']:.1f} ms, {measured['ratio']:.2f}x; "
        f"per stage p50 ms {measured['stage_p50_ms']}; memory grew "
        f"{measured['rss_growth_mb']:.0f} MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=50_000)
    parser.add_argument("--relations", type=int, default=1_000_000)
    parser.add_argument("--hubs", type=int, default=5)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--reuse", action="store_true", help="the graph is already loaded")
    parser.add_argument(
        "--copy-only",
        action="store_true",
        help="write only the graph's copy in OpenSearch (no Neo4j) and time `graph` reading "
        "it; its searches run on the documents of --documents-kb (built by a plain run with "
        "--nodes 50000)",
    )
    parser.add_argument("--documents-kb", default="bench-kg-1000000")
    parser.add_argument(
        "--strategy",
        choices=["kar", "graph", "graph_walk"],
        default="kar",
        help="kar: KAR's KG stage against one k-NN query; graph, graph_walk: that strategy "
        "end to end against `base`",
    )
    args = parser.parse_args()
    settings = get_settings()
    kb = f"bench-kg-{args.relations}"
    if args.copy_only:
        measure_copy_only(settings, kb, args)
        return
    if args.reuse:
        vectors = unit(np.random.default_rng(11), args.nodes)
        opensearch = connections.opensearch_client(settings)
        with connections.neo4j_driver(settings) as driver:
            missing = args.relations - relation_count(driver, kb)
            if missing > 0:  # a build stopped part way: the rest, drawn afresh
                started = time.perf_counter()
                write_relations(driver, kb, args.nodes, missing, args.hubs, seed=missing)
                print(f"wrote the missing {missing:,} relations in "
                      f"{time.perf_counter() - started:.0f} s")  # fmt: skip
            copied = graph_projection.state(opensearch, kb)
            if missing > 0 or copied is None or not copied.complete:
                copy_graph(settings, driver, opensearch, kb)
    else:
        vectors = build(settings, kb, args.nodes, args.relations, args.hubs)
    with connections.neo4j_driver(settings) as driver:
        degree, _, _ = driver.execute_query(
            "MATCH (h:Node {kb: $kb, id: '0'})-[r]-() RETURN count(r) AS d", kb=kb
        )
    if args.strategy != "kar":
        figures = {"nodes": args.nodes, "relations": args.relations,
                   "hub_degree": degree[0]["d"], "strategy": args.strategy}  # fmt: skip
        sources = ["neo4j", "opensearch"]
        if args.relations <= settings.graph.snapshot_max_relations:
            sources.append("snapshot")
        for source in sources:
            measured = asyncio.run(
                measure_graph(settings, kb, vectors, args.queries, source, args.strategy)
            )
            figures[source] = measured
            if measured["copy_load_s"] is not None:
                print(f"the graph was copied into memory in {measured['copy_load_s']:.1f} s")
            report(args.relations, source, args.strategy, measured)
        save("graph_latency", figures)
        return
    figures = asyncio.run(measure(settings, kb, vectors, args.queries, args.hubs))
    figures.update(
        {
            "nodes": args.nodes,
            "relations": args.relations,
            "hub_degree": degree[0]["d"],
            "hops": settings.rewrite.kar_hops,
            "hub_cap": settings.rewrite.kar_hub_cap,
            "top_k": settings.rewrite.kar_top_k,
        }
    )
    print(
        f"hub degree {figures['hub_degree']:,}; KG stage p50 {figures['p50_ms']:.1f} ms, "
        f"p95 {figures['p95_ms']:.1f} ms (goal p50 <= 30 ms); one k-NN query p50 "
        f"{figures['knn_p50_ms']:.1f} ms; ratio {figures['p50_ms'] / figures['knn_p50_ms']:.1f}x"
    )
    print(f"per stage p50 ms: {figures['stage_p50_ms']}")
    save("kg_stage_latency", figures)


if __name__ == "__main__":
    main()
