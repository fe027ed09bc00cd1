"""`graph` (no LLM): seeds from the index, a Personalized PageRank walk over Neo4j, the
top-scored documents boosted as a third sub-query."""

from __future__ import annotations

from typing import Any

import httpx

from kgqr_core.settings import Settings
from query_rewriter.background_server import free_port, running_proxy


def _ranked(url: str, index: str, strategy: str, text: str) -> tuple[list[str], dict[str, Any]]:
    response = httpx.post(
        f"{url}/{index}/_search",
        params={"kgqr.strategy": strategy, "kgqr.explain": "true"},
        json={"query": {"match": {"text": text}}, "size": 8},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    return [hit["_id"] for hit in response.json()["hits"]["hits"]], response.json()["kgqr"]


def test_the_walk_lifts_a_document_linked_to_the_querys_evidence(
    proxy_url: str, movies_kb: str
) -> None:
    """Collateral (m2) names neither Tom Cruise nor a hitman; its `starring` relation to
    Tom Cruise (p3), the query's top document, is what lifts it."""
    base, _ = _ranked(proxy_url, movies_kb, "base", "Tom Cruise hitman")
    walked, explain = _ranked(proxy_url, movies_kb, "graph", "Tom Cruise hitman")
    assert explain["fallback"] is None and explain["llm_calls"] == 0
    assert base[0] == walked[0] == "p3"
    assert walked.index("m2") < base.index("m2")
    nodes = [node["id"] for node in explain["details"]["graph_nodes"]]
    assert "m2" in nodes and nodes.index("m2") < nodes.index("g1")
    # What lifted Collateral: Tom Cruise, the top seed, stars in it.
    paths = {node["id"]: node["path"] for node in explain["details"]["graph_nodes"]}
    assert paths["m2"] == "p3 --inverse of starring--> m2"
    assert {"propagate", "walk"} <= set(explain["stages_ms"])


def test_without_the_graph_the_search_is_the_plain_one_and_says_so(
    settings: Settings, movies_kb: str
) -> None:
    no_graph = settings.model_copy(
        update={"neo4j_uri": f"bolt://127.0.0.1:{free_port()}", "rewrite_cache_ttl_s": 0}
    )
    with running_proxy(no_graph) as url:
        ranked, explain = _ranked(url, movies_kb, "graph", "Tom Cruise hitman")
    assert explain["fallback"]["stage"] == "propagate" and ranked[0] == "p3"


def test_fusion_with_the_plain_query_keeps_its_first_hit_first_on_every_page(
    proxy_url: str, movies_kb: str
) -> None:
    def page(strategy: str, **options: str) -> tuple[list[str], dict[str, Any]]:
        response = httpx.post(
            f"{proxy_url}/{movies_kb}/_search",
            params={"kgqr.strategy": strategy, "kgqr.explain": "true", **options},
            json={"query": {"match": {"text": "Al Pacino"}}, "size": 4},
            timeout=120,
        )
        assert response.status_code == 200, response.text
        return [hit["_id"] for hit in response.json()["hits"]["hits"]], response.json()["kgqr"]

    plain, _ = page("base")
    fused, explain = page("graph", **{"kgqr.param.fusion.plain": "1"})
    assert fused[0] == plain[0] and "fused with base" in explain["fusion"]
    second, _ = page("graph", **{"kgqr.param.fusion.plain": "1", "from": "2"})
    whole, _ = page("graph", **{"kgqr.param.fusion.plain": "1", "size": "8"})
    assert fused[:2] + second[:2] == whole[:4]
