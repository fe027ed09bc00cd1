"""KAR's stages on a small ingested graph, against real OpenSearch, Neo4j and the LLM."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from ingest import graph_projection
from ingest.kb_removal import drop_knowledge_base
from kgqr_core import connections
from kgqr_core.embedder import get_embedder
from kgqr_core.llm import AsyncLlmClient
from kgqr_core.settings import Settings
from kgqr_ops.background_proxy import free_port, running_proxy
from plugin import schema
from plugin.kb_meta import DocumentStructure
from query_rewriter.engine.gateway import EngineSession, opensearch_http_client
from query_rewriter.graph.copies import load_snapshot
from query_rewriter.graph.projection import ProjectedGraph
from query_rewriter.graph.store import Neighbours, Neo4jGraph
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.vector_lookups import exact_cosine, most_similar_documents
from tests.integration.ingest_helpers import TINY_KB, ingested
from tests.integration.search_helpers import explained_search, metric_sample

KB = "kar-movies"
INDEX = schema.documents_index(KB)
QUERY = "which director made films with Al Pacino?"


@pytest.fixture(scope="module")
def movies(settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any,
           ingest_worker: Any) -> Iterator[str]:  # fmt: skip
    with ingested(settings, opensearch, neo4j_driver, redis_client, TINY_KB, KB):
        yield INDEX
    drop_knowledge_base(opensearch, neo4j_driver, redis_client, "kar-hub")


def _run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


async def _neighbourhood(
    settings: Settings, kb: str, ids: list[str], hops: int, cap: int, with_names: bool = False
) -> Neighbours:
    async with connections.async_neo4j_driver(settings) as driver:
        return await Neo4jGraph(driver).neighbours(kb, ids, hops, cap, with_names)


def _copied(settings: Settings, kb: str, ids: list[str], hops: int, cap: int) -> Neighbours:
    """The same expansion from the proxy's in-memory copy of the graph."""
    with connections.neo4j_driver(settings) as driver:
        snapshot = load_snapshot(driver, kb, 0, 1_000_000)
    assert snapshot is not None
    return snapshot.neighbours(ids, hops, cap)


def _projected(settings: Settings, kb: str, ids: list[str], hops: int, cap: int) -> Neighbours:
    """The same expansion from the graph's copy in OpenSearch, made from Neo4j as it is."""
    with connections.neo4j_driver(settings) as driver:
        graph_projection.copy_graph(settings, driver, connections.opensearch_client(settings), kb)

    async def read() -> Neighbours | None:
        async with opensearch_http_client(settings) as http:
            return await ProjectedGraph(lambda: EngineSession(http, {}), 0).neighbours(
                kb, ids, hops, cap
            )

    found = _run(read())
    assert found is not None, "the copy did not answer"
    return found


GRAPH_SOURCES = pytest.mark.parametrize("source", ["neo4j", "snapshot", "opensearch"])


def _neighbours(
    settings: Settings, kb: str, ids: list[str], hops: int, cap: int, source: str = "neo4j"
) -> list:
    if source == "snapshot":
        return _copied(settings, kb, ids, hops, cap).paths()
    if source == "opensearch":
        return _projected(settings, kb, ids, hops, cap).paths()
    return _run(_neighbourhood(settings, kb, ids, hops, cap)).paths()


@GRAPH_SOURCES
def test_one_and_two_hop_neighbours(settings: Settings, movies: str, source: str) -> None:
    one = _neighbours(settings, KB, ["m1"], hops=1, cap=50, source=source)
    assert {n.id for n in one} == {"p1", "p2", "g1"}
    assert {n.relation_text() for n in one if n.id == "p1"} == {"directed_by"}
    two = _neighbours(settings, KB, ["m1"], hops=2, cap=50, source=source)
    assert {n.id for n in two} == {"p1", "p2", "g1", "m2", "m3"}
    via = next(n for n in two if n.id == "m3")
    assert via.relation_text() in {
        "directed_by -> [Michael Mann] -> inverse of directed_by",
        "starring -> [Al Pacino] -> inverse of starring",
    }


def test_the_ids_to_score_and_their_names(settings: Settings, movies: str) -> None:
    found = _run(_neighbourhood(settings, KB, ["m1"], hops=2, cap=50))
    assert found.document_ids() == {"p1", "p2", "g1", "m2", "m3"}
    # Second-hop names are read only when asked for; ids stand in for them otherwise.
    assert found.names()["m3"] == "m3"
    named = _run(_neighbourhood(settings, KB, ["m1"], hops=2, cap=50, with_names=True))
    assert named.names()["m3"] != "m3"
    assert named.names()["p1"] == found.names()["p1"] != "p1"
    only = found.paths({"m3"})
    assert [n.id for n in only] == ["m3"] and only[0].hops == 2


@GRAPH_SOURCES
def test_hub_nodes_are_capped(
    settings: Settings, neo4j_driver: Any, movies: str, source: str
) -> None:
    neo4j_driver.execute_query(
        "MERGE (h:Node {kb: 'kar-hub', id: 'hub'}) SET h.type = 'person' "
        "WITH h UNWIND range(1, 300) AS i "
        "MERGE (n:Node {kb: 'kar-hub', id: 'n' + i}) SET n.type = 'movie' "
        "MERGE (n)-[:STARRING]->(h)"
    )
    found = _neighbours(settings, "kar-hub", ["hub"], hops=2, cap=25, source=source)
    assert len(found) <= 25 + 25 * 25
    assert len([n for n in found if n.hops == 1]) == 25


def test_drf_scores_equal_a_direct_cosine(settings: Settings, opensearch: Any, movies: str) -> None:
    embedder = get_embedder(settings.embedder.model)
    query_vector = embedder.encode([QUERY])[0]
    ids = {"p1", "p3", "p4", "m3", "g1"}

    async def scored() -> dict[str, float]:
        async with opensearch_http_client(settings) as http:
            ctx = _context(settings, http, None)
            return await exact_cosine(ctx, INDEX, query_vector, ids)

    scores = _run(scored())
    stored = {
        doc_id: np.asarray(opensearch.get(index=INDEX, id=doc_id)["_source"]["vector"])
        for doc_id in ids
    }
    direct = {doc_id: float(v @ query_vector / np.linalg.norm(v)) for doc_id, v in stored.items()}
    assert set(scores) == ids
    for doc_id in ids:
        assert scores[doc_id] == pytest.approx(direct[doc_id], abs=1e-4)
    assert sorted(scores, key=lambda d: scores[d]) == sorted(direct, key=lambda d: direct[d])


def test_drf_ranks_and_fetches_in_one_request(settings: Settings, movies: str) -> None:
    query_vector = get_embedder(settings.embedder.model).encode([QUERY])[0]
    ids = {"p1", "p3", "p4", "m3", "g1"}

    async def ranked() -> tuple[dict[str, float], dict[str, tuple[float, dict[str, Any]]]]:
        async with opensearch_http_client(settings) as http:
            ctx = _context(settings, http, None)
            every = await exact_cosine(ctx, INDEX, query_vector, ids)
            return every, await most_similar_documents(
                ctx, INDEX, query_vector, ids, 2, ["id", "title"]
            )

    every, top = _run(ranked())
    best_two = sorted(every, key=lambda i: -every[i])[:2]
    assert list(top) == best_two
    for doc_id, (score, source) in top.items():
        assert score == pytest.approx(every[doc_id])
        assert source["id"] == doc_id and source["title"]


def test_msearch_answers_in_order_and_raises_on_a_failed_item(
    settings: Settings, movies: str
) -> None:
    async def run(bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        async with opensearch_http_client(settings) as http:
            return await EngineSession(http, {}).msearch(INDEX, bodies)

    answers = _run(run([{"query": {"ids": {"values": [i]}}} for i in ("m1", "p1")]))
    assert [a["hits"]["hits"][0]["_id"] for a in answers] == ["m1", "p1"]
    with pytest.raises(httpx.HTTPStatusError, match="msearch item failed"):
        _run(run([{"query": {"ids": {"values": ["m1"]}}}, {"query": {"term": {"vector": 1}}}]))


def _context(settings: Settings, http: httpx.AsyncClient, graph: Any,
             llm: AsyncLlmClient | None = None) -> StrategyContext:  # fmt: skip
    embedder = get_embedder(settings.embedder.model)

    async def embed(texts: list[str]) -> np.ndarray:
        return embedder.encode(texts)

    structure = DocumentStructure(types={"movie": ["year", "genre", "plot"], "person": [],
                                         "genre": []})  # fmt: skip
    return StrategyContext(settings, INDEX, KB, structure, llm, EngineSession(http, {}),  # type: ignore[arg-type]
                           embed, graph=graph)  # fmt: skip


def test_kar_end_to_end_explains_every_stage(llm_settings: Settings, movies: str) -> None:
    with running_proxy(llm_settings) as url:
        response = explained_search(url, INDEX, "kar", QUERY, size=3)
    explain = response.json()["kgqr"]
    assert explain["fallback"] is None, explain["fallback"]
    details = explain["details"]
    assert details["entities"][0]["name"] == QUERY  # the query is a pseudo-entity
    assert any(d["id"] == "p2" for d in details["entity_documents"])  # Al Pacino's document
    scores = [n["score"] for n in details["neighbours"]]
    # Heat's neighbours (Michael Mann, Al Pacino, Crime film) are found and ranked.
    assert scores, "KAR found no neighbour"
    assert scores == sorted(scores, reverse=True) and len(scores) <= llm_settings.rewrite.kar_top_k
    assert details["triples"], "KAR showed the LLM no triple"
    for triple in details["triples"]:
        assert set(triple) == {"head", "relation", "tail"} and all(triple.values())
    assert details["knowledge_format"] == llm_settings.rewrite.kar_knowledge_format
    assert explain["expansions"]
    assert {"parse", "entity_retrieval", "propagate", "drf", "generate"} <= set(
        explain["stages_ms"]
    )
    assert explain["llm_calls"] == 2
    assert set(explain["llm_prompt_chars"]) == {"parse", "generate"}
    assert explain["llm_prompt_chars"]["generate"] > len(QUERY)


def test_kar_degrades_to_the_plain_query_when_neo4j_is_down(
    llm_settings: Settings, movies: str, unique_name: str
) -> None:
    """Where the graph is read from Neo4j alone (the copies would answer without it:
    test_graph_strategy's test_without_the_graph_...)."""
    dead = llm_settings.replaced({
        "neo4j_uri": f"bolt://127.0.0.1:{free_port()}", "graph_projection_reads": False,
        "graph_snapshot_max_relations": 0,
    })  # fmt: skip
    with running_proxy(dead) as url:
        response = explained_search(url, INDEX, "kar", f"{QUERY} {unique_name}")
    assert response.status_code == 200
    explain = response.json()["kgqr"]
    assert explain["fallback"]["stage"] == "propagate"
    assert explain["strategy"] == "base"
    assert response.json()["hits"]["hits"]


def test_kar_boost_adds_the_graph_as_a_third_sub_query(llm_settings: Settings, movies: str) -> None:
    with running_proxy(llm_settings) as url:
        response = explained_search(url, INDEX, "kar+boost", QUERY)
    explain = response.json()["kgqr"]
    assert explain["fallback"] is None, explain["fallback"]
    queries = explain["final_query"]["query"]["hybrid"]["queries"]
    assert len(queries) == 3
    boost = queries[2]["bool"]["must"][0]["bool"]  # under the caller's matches
    boosted = {c["constant_score"]["filter"]["ids"]["values"][0] for c in boost["should"]}
    assert boosted == {n["id"] for n in explain["details"]["neighbours"] if n["score"] > 0}
    assert response.json()["hits"]["hits"]


def test_kar_index_links_entities_by_the_index_and_asks_the_llm_once(
    llm_settings: Settings, movies: str
) -> None:
    with running_proxy(llm_settings) as url:
        response = explained_search(url, INDEX, "kar_index", QUERY, params={"kar.seeds": 3})
        # The plain query over every document (its words optional beside a match_all
        # filter): a rewrite ranks within the caller's matches, the strategy's own plain
        # search within all.
        every = {"bool": {"should": [{"match": {"text": QUERY}}], "filter": [{"match_all": {}}]}}
        plain = httpx.post(f"{url}/{INDEX}/_search", params={"kgqr.strategy": "base"},
                           json={"query": every, "size": 3}, timeout=600)  # fmt: skip
    explain = response.json()["kgqr"]
    assert explain["fallback"] is None, explain["fallback"]
    details = explain["details"]
    # The entity documents are the plain query's top three hits, in its order.
    top_plain = [hit["_id"] for hit in plain.json()["hits"]["hits"]]
    assert [d["id"] for d in details["entity_documents"]] == top_plain
    assert details["neighbours"], "KAR found no neighbour of the linked documents"
    assert explain["llm_calls"] == 1 and set(explain["llm_prompt_chars"]) == {"generate"}
    assert "parse" not in explain["stages_ms"]
    assert explain["expansions"]


def test_a_budgeted_search_is_served_fast_then_full(
    llm_settings: Settings, movies: str, unique_name: str
) -> None:
    """Under a budget of 0 ms, an uncached kar search is answered by `graph` at once; the
    kar rewrite runs once in the background (an identical search meanwhile shares it), and
    the same search asked after it finished gets the full kar rewrite from the cache."""
    budgeted = llm_settings.replaced({"rewrite_budget_ms": 0, "rewrite_cache_ttl_s": 3600})
    query = f"{QUERY} ({unique_name})"
    cached_before = metric_sample("kgqr_background_rewrites_total", result="cached")
    with running_proxy(budgeted) as url:
        first = explained_search(url, INDEX, "kar", query).json()
        assert first["kgqr"]["strategy"] == "graph" and first["hits"]["hits"]
        assert first["kgqr"]["budget"] == {"served": "graph", "pending": "kar", "budget_ms": 0}
        again = explained_search(url, INDEX, "kar", query).json()["kgqr"]
        assert again["budget"] is not None and again["budget"]["pending"] == "kar"
        deadline = time.monotonic() + 600
        while True:
            explain = explained_search(url, INDEX, "kar", query).json()["kgqr"]
            # (An explain the engine refused names the strategy too, with nothing cached.)
            if (explain["strategy"] == "kar" and explain.get("cached")) or (
                time.monotonic() > deadline
            ):
                break
            time.sleep(2)
    assert explain["strategy"] == "kar", "the background kar rewrite never reached the cache"
    assert explain["cached"] and explain["budget"] is None and explain["expansions"]
    assert explain["details"]["neighbours"]  # the full rewrite, graph evidence and all
    # Two budgeted searches, one background rewrite.
    assert metric_sample("kgqr_background_rewrites_total", result="cached") == cached_before + 1
