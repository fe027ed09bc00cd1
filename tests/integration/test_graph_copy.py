"""The graph's search-time copy in OpenSearch (kgqr-KB-graph, one document a node): made
with a new knowledge base, kept equal to Neo4j by every ingest before the graph version
rises, made for an older graph by `kgqr kb project`, read by the proxy where no in-memory
copy is loaded, and dropped with the knowledge base."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
from click.testing import CliRunner

from ingest import graph_projection, index_shards
from kgqr_core import graph_version
from kgqr_core.settings import Settings
from kgqr_ops.background_proxy import running_proxy
from kgqr_ops.cli import main
from plugin import schema
from query_rewriter.engine.gateway import EngineSession, opensearch_http_client
from query_rewriter.graph.projection import ProjectedGraph
from tests.integration.ingest_helpers import (
    TINY_KB,
    graph_copy_matches_neo4j,
    ingested,
    run_to_end,
    sequel_source,
)


def _graph_search(url: str, kb: str, strategy: str = "graph") -> tuple[list[str], dict[str, Any]]:
    response = httpx.post(
        f"{url}/{schema.documents_index(kb)}/_search",
        params={"kgqr.strategy": strategy, "kgqr.explain": "true"},
        json={"query": {"match": {"text": "Tom Cruise hitman"}}, "size": 8},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    return [hit["_id"] for hit in response.json()["hits"]["hits"]], response.json()["kgqr"]


def test_an_ingest_keeps_the_copy_equal_to_neo4j_before_the_version_rises(
    settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any,
    ingest_worker: Any, kb_name: str, tmp_path: Path,
) -> None:  # fmt: skip
    sequel = sequel_source(tmp_path / "sequel")
    with ingested(settings, opensearch, neo4j_driver, redis_client, TINY_KB, kb_name):
        copy = graph_projection.state(opensearch, kb_name)
        assert copy is not None and copy.complete  # a new KB's copy: whole from the start
        before = graph_copy_matches_neo4j(opensearch, neo4j_driver, kb_name)
        assert "m9" not in before["p1"]
        version = graph_version.parse(redis_client.get(graph_version.version_key(kb_name)))
        run_to_end(settings, opensearch, neo4j_driver, redis_client, sequel, kb_name)
        after = graph_copy_matches_neo4j(opensearch, neo4j_driver, kb_name)
        assert after["m9"] == {"p1"} and "m9" in after["p1"]
        assert graph_version.parse(redis_client.get(graph_version.version_key(kb_name))) > version
    assert not opensearch.indices.exists(index=schema.graph_index(kb_name))  # dropped with it


def test_an_older_graph_is_read_from_neo4j_until_kgqr_kb_project_copies_it(
    settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any,
    ingest_worker: Any, kb_name: str,
) -> None:  # fmt: skip
    """A KB ingested before copies were has none: the proxy expands in Neo4j, then in the
    copy once `kgqr kb project` made it, with the same ranking and paths."""
    no_memory_copy = settings.replaced(
        {
            "graph_snapshot_max_relations": 0,
            "rewrite_cache_ttl_s": 0,
            "graph_snapshot_check_s": 0.05,
        }
    )
    with ingested(settings, opensearch, neo4j_driver, redis_client, TINY_KB, kb_name):
        opensearch.indices.delete(index=schema.graph_index(kb_name))  # as an older kgqr left it
        with running_proxy(no_memory_copy) as url:
            from_neo4j, explain = _graph_search(url, kb_name)
            assert explain["details"]["graph_source"] == "neo4j"
            projected = CliRunner().invoke(main, ["kb", "project", kb_name])
            assert projected.exit_code == 0, projected.output
            assert "searches read it from now on" in projected.output
            graph_copy_matches_neo4j(opensearch, neo4j_driver, kb_name)
            from_copy, explain_copy = _graph_search(url, kb_name)
        assert explain_copy["details"]["graph_source"] == "opensearch"
        assert from_copy == from_neo4j and "m2" in from_copy
        assert explain_copy["details"]["graph_nodes"] == explain["details"]["graph_nodes"]


def test_kgqr_kb_project_removes_the_documents_of_nodes_neo4j_no_longer_has(
    settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any,
    ingest_worker: Any, kb_name: str, monkeypatch: Any,
) -> None:  # fmt: skip
    """Read back shard by shard, a page at a time (no scroll, whose end the ingest account
    would need a cluster-wide right for), every stale document goes and no other."""
    with ingested(settings, opensearch, neo4j_driver, redis_client, TINY_KB, kb_name):
        index = schema.graph_index(kb_name)
        kept = opensearch.get(index=index, id=schema.graph_copy_id("p1"))["_source"]
        for ghost in ("ghost-1", "ghost-2", "ghost-3"):
            opensearch.index(index=index, id=schema.graph_copy_id(ghost),
                             body={**kept, "id": ghost}, refresh=True)  # fmt: skip
        monkeypatch.setattr(graph_projection, "READ_BATCH", 2)  # pages of two
        copy = graph_projection.state(opensearch, kb_name)
        assert copy is not None
        written, removed = graph_projection.project_all(neo4j_driver, opensearch, kb_name,
                                                        copy.edges)  # fmt: skip
        assert removed == 3 and written > 4
        graph_copy_matches_neo4j(opensearch, neo4j_driver, kb_name)  # the ghosts gone


def test_kgqr_kb_project_reads_back_only_what_the_copy_held_when_it_began(
    settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any,
    ingest_worker: Any, kb_name: str, monkeypatch: Any,
) -> None:  # fmt: skip
    """Documents written while it reads back (an ingest copying nodes) are not followed:
    under a busy ingest a read that follows them would not end. A stray document written
    after its first page shows it: it is left to the next `kb project`."""
    with ingested(settings, opensearch, neo4j_driver, redis_client, TINY_KB, kb_name):
        index = schema.graph_index(kb_name)
        kept = opensearch.get(index=index, id=schema.graph_copy_id("p1"))["_source"]
        opensearch.index(index=index, id=schema.graph_copy_id("early"),
                         body={**kept, "id": "early"}, refresh=True)  # fmt: skip
        monkeypatch.setattr(graph_projection, "READ_BATCH", 2)
        read_page = index_shards.shard_search
        late = {**kept, "id": "late"}

        def page_then_a_write(*args: Any, **kwargs: Any) -> list[Any]:
            page = read_page(*args, **kwargs)
            if "range" in args[3]["query"] and late:  # a page of the read-back: once
                opensearch.index(index=index, id=schema.graph_copy_id("late"), body=late,
                                 refresh=True)  # fmt: skip
                late.clear()
            return page

        monkeypatch.setattr(index_shards, "shard_search", page_then_a_write)
        copy = graph_projection.state(opensearch, kb_name)
        assert copy is not None
        _, removed = graph_projection.project_all(neo4j_driver, opensearch, kb_name, copy.edges)
        assert not late  # written during the read-back
        assert removed == 1
        assert not opensearch.exists(index=index, id=schema.graph_copy_id("early"))
        assert opensearch.exists(index=index, id=schema.graph_copy_id("late"))


def test_a_copy_still_being_made_is_not_read(
    settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any,
    ingest_worker: Any, kb_name: str,
) -> None:  # fmt: skip
    """An incomplete copy (a `kgqr kb project` under way or interrupted) would miss edges:
    the proxy reads Neo4j, and so it does with KGQR_GRAPH_PROJECTION_READS off."""
    no_memory_copy = settings.replaced(
        {"graph_snapshot_max_relations": 0, "rewrite_cache_ttl_s": 0}
    )
    with ingested(settings, opensearch, neo4j_driver, redis_client, TINY_KB, kb_name):
        with running_proxy(no_memory_copy.replaced({"graph_projection_reads": False})) as url:
            assert _graph_search(url, kb_name)[1]["details"]["graph_source"] == "neo4j"
        opensearch.indices.put_mapping(
            index=schema.graph_index(kb_name),
            body=schema.GraphCopyState(complete=False, edges=64).as_mapping(),
        )
        with running_proxy(no_memory_copy) as url:
            assert _graph_search(url, kb_name)[1]["details"]["graph_source"] == "neo4j"


def test_a_read_made_before_another_workers_commit_does_not_overwrite_a_later_one(
    opensearch: Any, neo4j_driver: Any, kb_name: str
) -> None:
    """Two workers touch p1 (a hub any chunk may touch): one reads it, the other commits a
    new edge and writes the copy from its later read, then the first writes its older read
    last. The engine keeps the later read's document."""
    neo4j_driver.execute_query(
        "MERGE (m:Node {kb: $kb, id: 'm1'}) SET m.type = 'movie' "
        "MERGE (p:Node {kb: $kb, id: 'p1'}) SET p.type = 'person' "
        "MERGE (m)-[:DIRECTED_BY]->(p)",
        kb=kb_name,
    )
    try:
        graph_projection.create(opensearch, kb_name, 64, complete=True)
        graph_projection.project_nodes(neo4j_driver, opensearch, kb_name, {"m1", "p1"})
        earlier = graph_projection.read_nodes(neo4j_driver, kb_name, ["p1"], 64)
        neo4j_driver.execute_query(
            "MATCH (p:Node {kb: $kb, id: 'p1'}) MERGE (m:Node {kb: $kb, id: 'm9'}) "
            "SET m.type = 'movie' MERGE (m)-[:DIRECTED_BY]->(p)",
            kb=kb_name,
        )
        graph_projection.project_nodes(neo4j_driver, opensearch, kb_name, {"p1", "m9"})
        graph_projection.write_nodes(opensearch, kb_name, earlier)  # the slower worker's
        copied = graph_copy_matches_neo4j(opensearch, neo4j_driver, kb_name)
        assert copied["p1"] == {"m1", "m9"}
        # And the other way round, a later read written after an earlier one replaces it.
        later = graph_projection.read_nodes(neo4j_driver, kb_name, ["p1"], 64)
        neo4j_driver.execute_query("MATCH (m:Node {kb: $kb, id: 'm9'}) DETACH DELETE m",
                                   kb=kb_name)  # fmt: skip
        graph_projection.write_nodes(opensearch, kb_name, later)
        graph_projection.project_nodes(neo4j_driver, opensearch, kb_name, {"p1", "m9"})
        assert graph_copy_matches_neo4j(opensearch, neo4j_driver, kb_name)["p1"] == {"m1"}
    finally:
        neo4j_driver.execute_query("MATCH (n:Node {kb: $kb}) DETACH DELETE n", kb=kb_name)
        opensearch.indices.delete(index=schema.graph_index(kb_name), ignore_unavailable=True)


def test_a_document_written_after_its_relations_is_typed_in_its_neighbours_edges(
    settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any,
    ingest_worker: Any, kb_name: str, tmp_path: Path,
) -> None:  # fmt: skip
    """A relation arriving first makes its ends untyped nodes, and p1's document records
    m9 as untyped; the document's later chunk types m9 and rewrites p1's document too, or
    `graph` would never score m9 from p1."""
    relations, documents = tmp_path / "relations", tmp_path / "documents"
    relations.mkdir()
    documents.mkdir()
    (relations / "documents.jsonl").write_text("")  # a jsonl source names its documents
    (relations / "relations.jsonl").write_text(
        json.dumps({"source": "m9", "type": "directed_by", "target": "p1"}) + "\n"
    )
    (documents / "documents.jsonl").write_text(
        json.dumps({"id": "m9", "type": "movie", "title": "Miami Vice"}) + "\n"
    )
    with ingested(settings, opensearch, neo4j_driver, redis_client, TINY_KB, kb_name):
        for source in (relations, documents):
            run_to_end(settings, opensearch, neo4j_driver, redis_client, f"jsonl:{source}", kb_name)
        # The copy holds each edge with its other end's type as Neo4j has it (checked
        # there), and Neo4j has m9 typed now: p1's edge to it is typed in the copy.
        assert "m9" in graph_copy_matches_neo4j(opensearch, neo4j_driver, kb_name)["p1"]
        records, _, _ = neo4j_driver.execute_query(
            "MATCH (m:Node {kb: $kb, id: 'm9'}) RETURN m.type AS type", kb=kb_name
        )
        assert [record["type"] for record in records] == ["movie"]


def test_a_node_whose_id_is_longer_than_a_document_id_may_be_is_copied_and_read(
    settings: Settings, opensearch: Any, neo4j_driver: Any, kb_name: str
) -> None:
    """An entity's id is its name, up to 512 characters: more bytes than the engine's
    document ids take once prefixed or multibyte. Its document is keyed by a digest."""
    long = "entity:" + "é" * 300  # 607 bytes
    neo4j_driver.execute_query(
        "MERGE (d:Node {kb: $kb, id: 'd1'}) SET d.type = 'passage' "
        "MERGE (e:Node {kb: $kb, id: $long}) SET e.type = 'entity' "
        "MERGE (d2:Node {kb: $kb, id: 'd2'}) SET d2.type = 'passage' "
        "MERGE (d)-[:MENTIONS]->(e) MERGE (d2)-[:MENTIONS]->(e)",
        kb=kb_name, long=long,
    )  # fmt: skip
    try:
        graph_projection.copy_graph(settings, neo4j_driver, opensearch, kb_name)
        assert set(graph_copy_matches_neo4j(opensearch, neo4j_driver, kb_name)[long]) == {
            "d1", "d2"
        }  # fmt: skip

        async def read() -> Any:
            async with opensearch_http_client(settings) as http:
                graph = ProjectedGraph(lambda: EngineSession(http, {}), 0)
                return await graph.neighbours(kb_name, ["d1"], hops=2, cap=50)

        hood = asyncio.run(read())
        assert hood is not None and hood.bridged_documents() == {"d2"}  # through the entity
    finally:
        neo4j_driver.execute_query("MATCH (n:Node {kb: $kb}) DETACH DELETE n", kb=kb_name)
        opensearch.indices.delete(index=schema.graph_index(kb_name), ignore_unavailable=True)


def test_a_chunk_retried_after_its_graph_writes_still_rewrites_its_neighbours_copies(
    settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any,
    ingest_worker: Any, kb_name: str, monkeypatch: Any,
) -> None:  # fmt: skip
    """Michael Mann retyped, and the attempt failing after Neo4j took it but before the copy
    was written (OpenSearch gone a moment): the retry read him as retyped already, so the
    films he directed kept `person` in their copies' edges for good."""
    from ingest.chunk_ingest import ingest_chunk
    from ingest.job_store import JobStore
    from ingest.records import Document
    from ingest.worker_resources import WorkerResources

    with ingested(settings, opensearch, neo4j_driver, redis_client, TINY_KB, kb_name):
        record = Document(id="p1", type="director", title="Michael Mann").model_dump(mode="json")
        resources, job_id = WorkerResources(settings), f"{kb_name}-retyping"
        jobs, written = JobStore(redis_client), graph_projection.project_nodes
        jobs.start(job_id, kb_name, "test")

        def down_once(*args: Any) -> int:
            monkeypatch.setattr(graph_projection, "project_nodes", written)
            raise ConnectionError("OpenSearch is restarting")

        monkeypatch.setattr(graph_projection, "project_nodes", down_once)
        try:
            try:
                ingest_chunk(resources, job_id, kb_name, 0, [record])
            except ConnectionError:
                pass
            else:
                raise AssertionError("the first attempt did not fail")
            ingest_chunk(resources, job_id, kb_name, 0, [record])  # the retry
        finally:
            resources.neo4j.close()
            jobs.forget(job_id)
        neighbours = graph_copy_matches_neo4j(opensearch, neo4j_driver, kb_name)
        assert {"m1", "m2", "m3"} <= neighbours["p1"]
