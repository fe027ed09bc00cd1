"""The LLM-free graph strategies: `graph` (the plain query's first hit and the documents
the graph links it to, ranked by similarity to the query) and `graph_walk` (seeds from the
index, a Personalized PageRank walk); both boost what they find as a third sub-query."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import numpy as np
import pytest
import redis.asyncio as aioredis

from kgqr_core import graph_version
from kgqr_core.settings import Settings
from kgqr_ops.background_proxy import free_port, running_proxy
from plugin import schema
from query_rewriter.engine.gateway import EngineSession, opensearch_http_client
from query_rewriter.graph.copies import GraphSnapshots
from query_rewriter.graph.in_memory import GraphSnapshot
from query_rewriter.search.state import knowledge_base_names
from tests.integration.ingest_helpers import TINY_KB, ingested, run_to_end, sequel_source
from tests.integration.search_helpers import explained_search, metric_sample


def _ranked(
    url: str, index: str, strategy: str, text: str, params: dict[str, float] | None = None
) -> tuple[list[str], dict[str, Any]]:
    response = explained_search(url, index, strategy, text, size=8, params=params)
    assert response.status_code == 200, response.text
    return [hit["_id"] for hit in response.json()["hits"]["hits"]], response.json()["kgqr"]


def test_the_walk_lifts_a_document_linked_to_the_querys_evidence(
    proxy_url: str, movies_kb: str
) -> None:
    """Collateral (m2) names neither Tom Cruise nor a hitman; its `starring` relation to
    Tom Cruise (p3), the query's top document, is what lifts it."""
    base, _ = _ranked(proxy_url, movies_kb, "base", "Tom Cruise hitman")
    walked, explain = _ranked(proxy_url, movies_kb, "graph_walk", "Tom Cruise hitman")
    assert explain["fallback"] is None and explain["llm_calls"] == 0
    assert base[0] == walked[0] == "p3"
    assert "m2" not in base and "m2" in walked  # not a match of the query: the graph adds it
    nodes = [node["id"] for node in explain["details"]["graph_nodes"]]
    assert "m2" in nodes and nodes.index("m2") < nodes.index("g1")
    # What lifted Collateral: Tom Cruise, the top seed, stars in it.
    paths = {node["id"]: node["path"] for node in explain["details"]["graph_nodes"]}
    assert paths["m2"] == "p3 --inverse of starring--> m2"
    assert {"propagate", "walk"} <= set(explain["stages_ms"])


def test_the_bridge_lifts_what_the_first_hit_links_to_by_similarity_to_the_query(
    proxy_url: str, movies_kb: str
) -> None:
    """`graph` follows only the first hit's links: Tom Cruise (p3) stars in Collateral
    (m2), which names neither him nor a hitman; the films he links to are ranked by their
    documents' similarity to the query, and the explain shows each one's link."""
    base, _ = _ranked(proxy_url, movies_kb, "base", "Tom Cruise hitman")
    bridged, explain = _ranked(proxy_url, movies_kb, "graph", "Tom Cruise hitman")
    assert explain["fallback"] is None and explain["llm_calls"] == 0
    details = explain["details"]
    assert base[0] == bridged[0] == details["kept_first"] == "p3"
    assert "m2" not in base and "m2" in bridged  # not a match of the query: the graph adds it
    scores = [node["score"] for node in details["graph_nodes"]]
    assert scores == sorted(scores, reverse=True) and 0 < len(scores) <= details["candidates"]
    paths = {node["id"]: node["path"] for node in details["graph_nodes"]}
    assert paths["m2"] == "p3 --inverse of starring--> m2"
    assert all(path.startswith("p3 --") for path in paths.values())
    assert {"propagate", "drf"} <= set(explain["stages_ms"])
    # Only the best `graph.boosts` are boosted (a first hit mentioning hubs reaches more
    # documents than the engine takes clauses).
    _, capped = _ranked(proxy_url, movies_kb, "graph", "Tom Cruise hitman", {"graph.boosts": 1})
    assert [node["id"] for node in capped["details"]["graph_nodes"]] == [
        details["graph_nodes"][0]["id"]
    ]
    boost = capped["final_query"]["query"]["hybrid"]["queries"][2]["bool"]
    boosts = boost["must"][0]["bool"]["should"]  # under the query's matches and the graph's
    assert sum(clause["constant_score"]["boost"] > 0.001 for clause in boosts) == 2


def test_the_walks_weight_decides_how_far_it_moves_the_ranking_below_the_first_hit(
    proxy_url: str, movies_kb: str
) -> None:
    """`graph.weight=0` leaves the plain hybrid ranking; `1` ranks by the graph alone (in
    the order of the explain's graph nodes, the last of which min-max maps to zero), except
    the plain query's first hit, which stays first."""
    text = "Michael Mann director"

    def weights(explain: dict[str, Any]) -> list[float]:
        processor = explain["final_query"]["search_pipeline"]["phase_results_processors"][0]
        return list(processor["normalization-processor"]["combination"]["parameters"]["weights"])

    plain, _ = _ranked(proxy_url, movies_kb, "base", text, {"hybrid.bm25": 0.3})
    params = {"hybrid.bm25": 0.3, "graph.weight": 0.0}
    for strategy in ("graph", "graph_walk", "graph_mix"):
        unboosted, explain = _ranked(proxy_url, movies_kb, strategy, text, params)
        assert unboosted == plain and weights(explain) == [0.3, 0.7, 0.0]
    walked, explain = _ranked(proxy_url, movies_kb, "graph_walk", text, {"graph.weight": 1.0})
    assert weights(explain)[2] == 1.0 and walked[0] == plain[0]
    nodes = [node["id"] for node in explain["details"]["graph_nodes"] if node["id"] != plain[0]]
    assert len(nodes) > 2 and walked[1 : len(nodes)] == nodes[:-1]
    assert walked != plain
    # The bridge's boosts keep every candidate above the unboosted documents, the least
    # similar one too (the plain hits, boosted at a floor, hold the boost's minimum).
    bridged, explain = _ranked(proxy_url, movies_kb, "graph", text, {"graph.weight": 1.0})
    nodes = [node["id"] for node in explain["details"]["graph_nodes"]]
    assert len(nodes) > 2 and bridged[: len(nodes) + 1] == [plain[0], *nodes]


POETS = [  # (poet, town, river): each poet's passage and a river passage per town
    ("Ada Quill", "Marrowby", "Silverrun"),
    ("Tom Byrne", "Dunmore", "Dane"),
    ("Mary Oakes", "Holtham", "Wendle"),
    ("John Pell", "Carrow", "Ouseley"),
]


def _corpus_kg(folder: Path) -> str:
    """A MuSiQue-shaped corpus KG (passages, OpenIE entities and triples). Only Ada Quill's
    town's river passage avoids the question's words ("the river that flows through the
    birthplace of the poet"); the other towns' river passages echo them."""
    passages, openie = [], []
    for poet, town, river in POETS:
        passages.append({"title": poet, "text": f"{poet} was an English poet born in {town}."})
        openie.append({"extracted_entities": [poet, town],
                       "extracted_triples": [[poet, "born in", town]]})  # fmt: skip
        flows = (
            f"The {river} passes the old mills of {town} before it reaches the sea."
            if poet == "Ada Quill"
            else f"The {river} is the river that flows through the poets' birthplace {town}."
        )
        passages.append({"title": river, "text": flows})
        openie.append({"extracted_entities": [river, town],
                       "extracted_triples": [[river, "flows through", town]]})  # fmt: skip
    (folder / "corpus.json").write_text(json.dumps(passages))
    (folder / "openie_fixture.json").write_text(json.dumps({"docs": openie}))
    return f"musique:{folder}"


def test_the_passage_two_hops_from_the_query_is_lifted_through_the_bridge_entity(
    settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any,
    ingest_worker: Any, proxy_url: str, tmp_path: Path,
) -> None:  # fmt: skip
    """The Silverrun's passage names neither Ada Quill nor anything the question asks; it
    is two hops from her (her passage's birthplace, Marrowby, which it mentions). `base`
    ranks it below the other rivers' passages. `graph_walk` ranks it right below the plain
    first hit (Ada Quill's passage, which stays first: the walk never displaces the top).
    `graph` lifts it too, by less: its boost is its similarity to the question, which this
    passage is built to lack. `graph_mix` finds it by both signals. Every explain names the
    bridge."""
    question = "Which river flows through the birthplace of the poet Ada Quill?"
    spec = _corpus_kg(tmp_path)
    with ingested(settings, opensearch, neo4j_driver, redis_client, spec, "graph-two-hop") as kb:
        index = schema.documents_index(kb)
        base, _ = _ranked(proxy_url, index, "base", question)
        walked, walk = _ranked(proxy_url, index, "graph_walk", question)
        bridged, bridge = _ranked(proxy_url, index, "graph", question)
        mixed, mix = _ranked(proxy_url, index, "graph_mix", question)
    ada, silverrun = "p0", "p1"
    assert base[0] == walked[0] == bridged[0] == mixed[0] == ada
    assert walk["details"]["kept_first"] == bridge["details"]["kept_first"] == ada
    assert base.index(silverrun) > 2, base  # the other rivers echo the question
    assert walked[1] == silverrun
    assert bridged.index(silverrun) < base.index(silverrun), (base, bridged)
    assert mixed.index(silverrun) < base.index(silverrun), (base, mixed)
    mixed_node = next(n for n in mix["details"]["graph_nodes"] if n["id"] == silverrun)
    assert mixed_node["bridged"] == 1.0 and mixed_node["walked"] > 0  # both signals found it
    for explain in (walk, bridge, mix):
        paths = {node["id"]: node["path"] for node in explain["details"]["graph_nodes"]}
        assert "marrowby" in paths[silverrun].lower(), paths[silverrun]


def test_without_the_graph_the_search_is_the_plain_one_and_says_so(
    settings: Settings, movies_kb: str
) -> None:
    """Neo4j unreachable, and the graph's copy in OpenSearch not read: no graph at all. With
    the copy read, the strategies need no Neo4j."""
    no_neo4j = settings.replaced(
        {"neo4j_uri": f"bolt://127.0.0.1:{free_port()}", "rewrite_cache_ttl_s": 0,
         "graph_snapshot_max_relations": 0}
    )  # fmt: skip
    with running_proxy(no_neo4j.replaced({"graph_projection_reads": False})) as url:
        for strategy in ("graph", "graph_walk", "graph_mix"):
            ranked, explain = _ranked(url, movies_kb, strategy, "Tom Cruise hitman")
            assert explain["fallback"]["stage"] == "propagate" and ranked[0] == "p3"
    with running_proxy(no_neo4j) as url:
        for strategy in ("graph", "graph_walk", "graph_mix"):
            ranked, explain = _ranked(url, movies_kb, strategy, "Tom Cruise hitman")
            assert explain["fallback"] is None, explain["fallback"]
            assert explain["details"]["graph_source"] == "opensearch" and "m2" in ranked


@pytest.mark.parametrize("mode", ["1", "2"])  # RRF below the kept hit; the strategy's order
def test_fusion_with_the_plain_query_keeps_its_first_hit_first_on_every_page(
    proxy_url: str, movies_kb: str, mode: str
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
    fused, explain = page("graph", **{"kgqr.param.fusion.plain": mode})
    assert fused[0] == plain[0] and "fused with base" in explain["fusion"]
    assert ("RRF" in explain["fusion"]) == (mode == "1")
    second, _ = page("graph", **{"kgqr.param.fusion.plain": mode, "from": "2"})
    whole, _ = page("graph", **{"kgqr.param.fusion.plain": mode, "size": "8"})
    assert fused[:2] + second[:2] == whole[:4]


@pytest.mark.parametrize("strategy", ["graph", "graph_walk"])
def test_the_walk_on_the_proxys_copy_of_the_graph_lifts_as_neo4js_does(
    settings: Settings, movies_kb: str, strategy: str
) -> None:
    """A proxy copies the graph into memory on its first `graph` search; once it walks the
    copy, the same document is lifted by the same path, as it is from the copy in
    OpenSearch. (Rewrites not cached: a cached one would not walk again.)"""
    uncached = settings.replaced({"rewrite_cache_ttl_s": 0})
    no_memory_copy = uncached.replaced({"graph_snapshot_max_relations": 0})
    with running_proxy(no_memory_copy.replaced({"graph_projection_reads": False})) as url:
        from_neo4j, explain = _ranked(url, movies_kb, strategy, "Tom Cruise hitman")
    assert explain["details"]["graph_source"] == "neo4j"
    with running_proxy(no_memory_copy) as url:
        from_opensearch, explain_copy = _ranked(url, movies_kb, strategy, "Tom Cruise hitman")
    assert explain_copy["details"]["graph_source"] == "opensearch"
    assert from_opensearch == from_neo4j
    assert explain_copy["details"]["graph_nodes"] == explain["details"]["graph_nodes"]
    deadline = time.monotonic() + 60
    with running_proxy(uncached) as url:
        while True:
            walked, explain = _ranked(url, movies_kb, strategy, "Tom Cruise hitman")
            source = explain["details"]["graph_source"]
            if source.startswith("snapshot") or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    assert explain["details"]["graph_source"].startswith("snapshot v")
    assert walked == from_neo4j
    paths = {node["id"]: node["path"] for node in explain["details"]["graph_nodes"]}
    assert paths["m2"] == "p3 --inverse of starring--> m2"


@pytest.mark.parametrize("preload", [False, True])
def test_a_preloaded_copy_answers_the_first_search(
    settings: Settings, movies_kb: str, preload: bool
) -> None:
    """With KGQR_GRAPH_SNAPSHOT_PRELOAD naming the KB, the proxy reads its copy as it
    starts, so even its first `graph` search expands in memory; without, the first one
    reads the copy in OpenSearch, however long the proxy has been up."""
    kb = movies_kb.removeprefix("kgqr-").removesuffix("-documents")
    configured = settings.replaced(
        {"rewrite_cache_ttl_s": 0, "graph_snapshot_preload": kb if preload else ""}
    )

    def loaded() -> float:
        return metric_sample("kgqr_graph_snapshot_loads_total", result="loaded")

    before = loaded()
    with running_proxy(configured) as url:
        deadline = time.monotonic() + (10 if preload else 2)
        while loaded() == before and time.monotonic() < deadline:
            time.sleep(0.1)
        _, explain = _ranked(url, movies_kb, "graph", "Tom Cruise hitman")
    source = explain["details"]["graph_source"]
    assert source.startswith("snapshot v") if preload else source == "opensearch", source


def test_preloading_every_knowledge_base_reads_what_kgqr_meta_lists_or_nothing(
    settings: Settings, movies_kb: str
) -> None:
    kb = movies_kb.removeprefix("kgqr-").removesuffix("-documents")

    async def preload_every_kb() -> tuple[list[str], list[str], list[str]]:
        redis = aioredis.Redis.from_url(settings.redis.url)
        service_http = opensearch_http_client(settings, service_account=True)
        as_kgqr = EngineSession(service_http, {})
        try:
            listed = await knowledge_base_names(as_kgqr)
            # Large KBs (benchmarks) are counted, not copied.
            small = settings.replaced({"graph_snapshot_max_relations": 100})
            snapshots = GraphSnapshots(small, redis)
            started = await snapshots.preload("*", lambda: knowledge_base_names(as_kgqr))
            await snapshots.settle()
            # A name kgqr-meta does not list (a typo) is not copied as an empty graph.
            named = GraphSnapshots(small, redis)
            typo = await named.preload(f"{kb},no-such-kb", lambda: knowledge_base_names(as_kgqr))
            await named.settle()
            assert typo == [kb]
            unlisted = GraphSnapshots(settings, redis)

            async def unreadable() -> list[str]:
                raise httpx.ConnectError("kgqr-meta unreachable")

            none = await unlisted.preload("*", unreadable)
            gone = aioredis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")
            blind = GraphSnapshots(settings, gone)
            none += await blind.preload(f"{kb},other", unreadable)
            await gone.aclose()
            return listed, started, none
        finally:
            await service_http.aclose()
            await redis.aclose()

    listed, started, none = asyncio.run(preload_every_kb())
    assert kb in listed and started == sorted(listed)
    assert none == []  # kgqr-meta or Redis unreadable: nothing preloaded, the proxy starts


def test_after_an_ingest_the_copy_is_not_served_until_the_new_graph_is_read(
    settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any,
    ingest_worker: Any, kb_name: str, tmp_path: Path,
) -> None:  # fmt: skip
    sequel = sequel_source(tmp_path / "sequel")
    looking_often = settings.replaced({"graph_snapshot_check_s": 0.05})

    def directed_by_mann(snapshot: GraphSnapshot) -> set[str]:
        return snapshot.neighbours(["p1"], hops=1, cap=50).document_ids()

    async def follow_an_ingest() -> None:
        redis = aioredis.Redis.from_url(settings.redis.url)
        snapshots = GraphSnapshots(looking_often, redis)
        try:
            assert await snapshots.current(kb_name) is None  # nothing copied yet: Neo4j
            await snapshots.settle()
            first = await snapshots.current(kb_name)
            assert first is not None and directed_by_mann(first) == {"m1", "m2", "m3"}
            await anyio.to_thread.run_sync(
                lambda: run_to_end(
                    settings, opensearch, neo4j_driver, redis_client, sequel, kb_name
                )
            )
            await asyncio.sleep(0.1)
            assert await snapshots.current(kb_name) is None, "a stale copy was served"
            await snapshots.settle()
            second = await snapshots.current(kb_name)
            assert second is not None and second.version > first.version
            assert directed_by_mann(second) == {"m1", "m2", "m3", "m9"}
            # Redis lost the KB's keys and writes raised the counter to the same number
            # again: the number alone named the copy read before as current.
            number = graph_version.parse(await redis.get(graph_version.version_key(kb_name)))
            await redis.set(graph_version.epoch_key(kb_name), graph_version.new_epoch())
            await asyncio.sleep(0.1)
            revision = await snapshots.revision(kb_name)
            assert revision is not None and revision.number == number
            assert await snapshots.current(kb_name) is None, "a copy of another epoch was served"
            await snapshots.settle()
            assert await snapshots.current(kb_name) is not None
        finally:
            await redis.aclose()

    with ingested(settings, opensearch, neo4j_driver, redis_client, TINY_KB, kb_name):
        asyncio.run(follow_an_ingest())


def test_the_processes_of_a_machine_share_one_copy_read_once_from_neo4j(
    settings: Settings, movies_kb: str, tmp_path: Path
) -> None:
    """Two proxy processes' copies: the first reads Neo4j and writes the copy, the second
    maps it and answers the same. After Redis loses the KB's epoch (its data), the copy
    is read again under a new one; a process allowed only smaller copies maps none."""
    kb = movies_kb.removeprefix("kgqr-").removesuffix("-documents")
    shared = settings.replaced({"graph_snapshot_dir": str(tmp_path)})

    def loads(result: str) -> float:
        return metric_sample("kgqr_graph_snapshot_loads_total", result=result)

    async def copy(snapshots: GraphSnapshots) -> GraphSnapshot | None:
        await snapshots.current(kb)
        await snapshots.settle()
        return await snapshots.current(kb)

    def folders() -> list[str]:
        return sorted(p.name for p in (tmp_path / kb).iterdir() if not p.name.startswith("."))

    async def share() -> None:
        redis = aioredis.Redis.from_url(settings.redis.url)
        try:
            loaded, mapped = loads("loaded"), loads("mapped")
            holder = GraphSnapshots(shared, redis)
            first = await copy(holder)
            second = await copy(GraphSnapshots(shared, redis))
            assert (loads("loaded") - loaded, loads("mapped") - mapped) == (1, 1)
            assert first is not None and second is not None
            assert isinstance(second.neighbour.base, np.memmap)
            seeds = [first.ids[n] for n in range(len(first.ids))]
            assert second.neighbours(seeds, 2, 50).paths() == first.neighbours(seeds, 2, 50).paths()
            before = folders()
            await redis.delete(graph_version.epoch_key(kb))
            again = await copy(GraphSnapshots(shared, redis))
            assert again is not None and loads("loaded") - loaded == 2
            assert len(folders()) == 1 and folders() != before
            too_large = loads("too_large")
            small = shared.replaced({"graph_snapshot_max_relations": 3})
            assert await copy(GraphSnapshots(small, redis)) is None
            assert loads("too_large") - too_large == 1 and loads("loaded") - loaded == 2
            # A dropped KB's copy is let go of: it was held until the KB was searched again.
            # Its files go too, wherever the drop ran.
            assert await holder.current(kb) is first
            holder.forget({kb})
            assert metric_sample("kgqr_graph_snapshot_relationships") == 0  # all it held
            await holder.settle()
            assert not (tmp_path / kb).exists()
            assert await holder.current(kb) is None  # read anew if the name is searched
            # A load still running as its KB goes does not write the copy back afterwards.
            holder.forget({kb})
            await holder.settle()
            assert not (tmp_path / kb).exists()
        finally:
            await redis.aclose()

    asyncio.run(share())


def test_a_graph_too_large_to_copy_or_unknown_versions_expand_in_neo4j(
    settings: Settings, movies_kb: str
) -> None:
    kb = movies_kb.removeprefix("kgqr-").removesuffix("-documents")

    async def sources() -> tuple[GraphSnapshot | None, GraphSnapshot | None]:
        redis = aioredis.Redis.from_url(settings.redis.url)
        small = GraphSnapshots(settings.replaced({"graph_snapshot_max_relations": 3}),
                               redis)  # fmt: skip
        await small.current(kb)
        await small.settle()
        too_large = await small.current(kb)
        await redis.aclose()
        # Redis unreachable: whether a copy is current cannot be told.
        gone = aioredis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")
        blind = GraphSnapshots(settings, gone)
        unknown = await blind.current(kb)
        await blind.settle()
        await gone.aclose()
        return too_large, unknown

    assert asyncio.run(sources()) == (None, None)


def test_a_cached_graph_rewrite_is_not_served_after_the_graph_changed(
    settings: Settings, redis_client: Any, movies_kb: str
) -> None:
    kb = movies_kb.removeprefix("kgqr-").removesuffix("-documents")
    looking_often = settings.replaced({"graph_snapshot_check_s": 0.05})
    with running_proxy(looking_often) as url:
        _, first = _ranked(url, movies_kb, "graph", "Al Pacino thriller")
        _, again = _ranked(url, movies_kb, "graph", "Al Pacino thriller")
        assert (first["cached"], again["cached"]) == (False, True)
        _ranked(url, movies_kb, "base", "Al Pacino thriller")
        graph_version.bump(redis_client, kb)  # what every ingest chunk does
        time.sleep(0.1)
        _, changed = _ranked(url, movies_kb, "graph", "Al Pacino thriller")
        _, base = _ranked(url, movies_kb, "base", "Al Pacino thriller")
    assert changed["cached"] is False, "a rewrite of the old graph was served"
    assert base["cached"] is True  # strategies that read no graph keep their cache
