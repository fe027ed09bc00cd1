"""A team's own index, written with opensearch-py in its own mapping and field names,
attached as a knowledge base: its graph built from a relations file and from its keyword
fields, its searches rewritten through kgqr in its own fields, nothing written to it, and
detaching it leaves it as it was.

The index holds the tiny movie KB: `headline`, `content`, `genre` (keyword), `embedding`
(the same model kgqr's own KBs use here), under the same ids as the fixture's relations.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result
from opensearchpy import OpenSearch
from opensearchpy.helpers import bulk
from opensearchpy.helpers.faceted_search import FacetedSearch, TermsFacet

from ingest import graph_projection, index_sync
from ingest.kb_removal import drop_knowledge_base
from kgqr_core.embedder import get_embedder
from kgqr_core.field_evidence import FieldEvidence
from kgqr_core.settings import Settings
from kgqr_ops.background_proxy import free_port, running_proxy
from kgqr_ops.cli import main
from kgqr_ops.nginx_front import running_front
from kgqr_ops.services.local_service import port_of
from plugin import kb_meta, schema
from plugin.field_map import FieldMap
from query_rewriter.search.kb_indices import MISS_TTL_S
from tests.integration.ingest_helpers import graph_copy_matches_neo4j

pytestmark = pytest.mark.quick

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tiny_kb"
KB = "team-movies"
INDEX = "team-movies-articles"
QUERY = {"match": {"content": "Heat, the 1995 film about bank robbers"}}
MAPPING: dict[str, Any] = {
    "settings": {"index": {"knn": True, "number_of_shards": 1, "number_of_replicas": 0}},
    "mappings": {
        "properties": {
            "headline": {"type": "text"},
            "content": {"type": "text"},
            "genre": {"type": "keyword"},
            "embedding": {"type": "knn_vector", "dimension": 384,
                          "method": {"name": "hnsw", "engine": "lucene",
                                     "space_type": "cosinesimil"}},
        }
    },
}  # fmt: skip


def _documents() -> list[dict[str, Any]]:
    documents = []
    for line in (FIXTURE / "documents.jsonl").read_text().splitlines():
        record = json.loads(line)
        fields = record.get("fields") or {}
        content = record.get("text") or "\n".join(f"{k}: {v}" for k, v in fields.items())
        genre = fields.get("genre")
        documents.append({"id": record["id"], "headline": record["title"],
                          "content": content, **({"genre": genre} if genre else {})})  # fmt: skip
    return documents


def team_documents(model: str) -> list[tuple[str, dict[str, Any]]]:
    """(id, source) of each document as the team's app writes it, with its vector."""
    documents = _documents()
    vectors = get_embedder(model).encode(
        [d["content"] for d in documents], [d["headline"] for d in documents]
    )
    return [
        (d["id"], {k: v for k, v in d.items() if k != "id"} | {"embedding": vector.tolist()})
        for d, vector in zip(documents, vectors, strict=True)
    ]


def kgqr(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def team_index(settings: Settings, opensearch: Any) -> Iterator[str]:
    """The team's index as its own app writes it (kgqr plays no part)."""
    opensearch.indices.delete(index=INDEX, ignore=[404])
    opensearch.indices.create(index=INDEX, body=MAPPING)
    for doc_id, body in team_documents(settings.embedder.model):
        opensearch.index(index=INDEX, id=doc_id, body=body)
    opensearch.indices.refresh(index=INDEX)
    yield INDEX
    opensearch.indices.delete(index=INDEX, ignore=[404])


def _index_state(opensearch: Any) -> tuple[Any, ...]:
    """What a write to the team's index would change: mapping, settings, writes counted."""
    stats = opensearch.indices.stats(index=INDEX, metric="indexing,docs")
    total = stats["indices"][INDEX]["total"]
    return (
        opensearch.indices.get_mapping(index=INDEX),
        opensearch.indices.get_settings(index=INDEX)[INDEX]["settings"]["index"].get("version"),
        total["indexing"]["index_total"],
        total["indexing"]["delete_total"],
        total["docs"]["count"],
    )


def test_a_dry_run_shows_the_suggested_field_map_and_writes_nothing(
    settings: Settings, opensearch: Any, team_index: str
) -> None:
    shown = kgqr("kb", "attach", KB, "--index", team_index, "--model",
                 settings.embedder.model, "--dry-run")  # fmt: skip
    assert shown.exit_code == 0, shown.output
    assert "content" in shown.output and "headline" in shown.output
    assert "embedding (384 dims" in shown.output and "dry run" in shown.output
    assert "knn queries on embedding" in shown.output  # what would be rewritten, and how
    assert kb_meta.load(opensearch, KB) is None


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        (["--text", "genre"], "text field [genre] is mapped as keyword"),
        (["--entity-field", "headline"], "entity field [headline] is mapped as text"),
        (["--vector", "nowhere"], "vector field [nowhere] is not in the index's mapping"),
        ([], "needs the model that made its vectors"),
    ],
)
def test_a_field_map_the_mapping_contradicts_is_refused(
    settings: Settings, opensearch: Any, team_index: str, options: list[str], reason: str
) -> None:
    model = ["--model", settings.embedder.model] if options else []
    refused = kgqr("kb", "attach", KB, "--index", team_index, *model, *options)
    assert refused.exit_code == 1 and reason in refused.output, refused.output
    assert kb_meta.load(opensearch, KB) is None


@pytest.mark.parametrize(
    ("index", "reason"),
    [
        (schema.META_INDEX, "kgqr's own indices"),
        ("team-*", "not one index or alias name"),
        ("team-a,team-b", "not one index or alias name"),
        ("_all", "not one index or alias name"),
    ],
)
def test_only_one_team_index_can_be_attached(opensearch: Any, index: str, reason: str) -> None:
    refused = kgqr("kb", "attach", KB, "--index", index, "--dry-run")
    assert refused.exit_code == 1 and reason in refused.output, refused.output


def test_a_data_stream_is_refused_before_its_first_rollover_breaks_it(opensearch: Any) -> None:
    """A data stream of one backing index was attached, and its sync failed at the first
    rollover ("names several indices now") with nothing the team could do about it."""
    stream = "team-movies-stream"
    opensearch.indices.put_index_template(name=stream, body={
        "index_patterns": [stream], "data_stream": {}, "template": {"mappings": {"properties": {
            "@timestamp": {"type": "date"}, "content": {"type": "text"}}}}})  # fmt: skip
    opensearch.index(index=stream, body={"@timestamp": "2026-11-30", "content": "Heat"},
                     op_type="create", refresh=True)  # fmt: skip
    try:
        refused = kgqr("kb", "attach", "team-stream", "--index", stream, "--dry-run")
        assert refused.exit_code == 1 and "is a data stream" in refused.output, refused.output
    finally:
        opensearch.transport.perform_request("DELETE", f"/_data_stream/{stream}")
        opensearch.indices.delete_index_template(name=stream)


def test_an_index_the_engine_refuses_to_read_is_one_line_not_a_traceback(
    opensearch: Any, neo4j_driver: Any, redis_client: Any
) -> None:
    """A closed index ended `kb graph` on a Python traceback of the engine's 400."""
    stores, index = (opensearch, neo4j_driver, redis_client), "team-movies-closed"
    with _attached_plain(stores, "team-closed", index, "--entity-field", "genre") as done:
        assert done.exit_code == 0, done.output
        opensearch.indices.close(index=index)
        failed = kgqr("kb", "graph", "team-closed", "--from-fields")
        assert failed.exit_code == 1 and "Traceback" not in failed.output, failed.output
        assert "OpenSearch refused a request (400): index_closed_exception" in failed.output


def test_a_lowered_result_window_is_paged_within(
    opensearch: Any, neo4j_driver: Any, redis_client: Any, ingest_worker: Any
) -> None:
    """Teams lower `index.max_result_window` to refuse deep paging; the graph jobs' and
    sync's pages of 1,000 (and the key and deletion lookups' 10,000) ended on its 400."""
    stores, kb, index = (opensearch, neo4j_driver, redis_client), "team-window", "team-window"
    with _attached_plain(stores, kb, index, "--entity-field", "genre") as done:
        assert done.exit_code == 0, done.output
        opensearch.indices.put_settings(index=index, body={"index": {"max_result_window": 2}})
        built = kgqr("kb", "graph", kb, "--from-fields")
        assert built.exit_code == 0, built.output
        genres = {d["id"]: {d["genre"]} for d in _documents() if "genre" in d}
        assert len(genres) > 2 and _genre_edges(neo4j_driver, kb) == genres
        keyed = kgqr("kb", "graph", kb, "--relations", str(FIXTURE / "relations.jsonl"))
        assert keyed.exit_code == 0, keyed.output
        opensearch.index(index=index, id="m4", body={"headline": "Thief", "genre": "heist"})
        opensearch.delete(index=index, id="m1")
        opensearch.indices.refresh(index=index)
        first = kgqr("kb", "sync", kb)  # no checkpoint yet: every document is read
        assert first.exit_code == 0 and "1 deleted" in first.output, first.output
        assert _genre_edges(neo4j_driver, kb) == {
            **{doc: genre for doc, genre in genres.items() if doc != "m1"},
            "m4": {"heist"},
        }


def test_a_cluster_that_refuses_fielddata_on_ids_has_every_document_read(
    opensearch: Any, neo4j_driver: Any, redis_client: Any, ingest_worker: Any
) -> None:
    """The graph and embed jobs read an attached index in one order, for resumed jobs to
    cut the same chunks. They sorted by `_id`, which loads every id into the engine's heap
    (deprecated), and which a cluster that turned `indices.id_field_data.enabled` off
    refuses: each shard is read in `_seq_no` order now, pages of two across three shards."""
    stores, kb, index = (
        (opensearch, neo4j_driver, redis_client),
        "team-no-id-sort",
        "team-no-id-sort",
    )
    refused = {"transient": {"indices.id_field_data.enabled": False}}
    with _attached_plain(stores, kb, index, "--entity-field", "genre", shards=3) as done:
        assert done.exit_code == 0, done.output
        opensearch.indices.put_settings(index=index, body={"index": {"max_result_window": 2}})
        opensearch.cluster.put_settings(body=refused)
        try:
            built = kgqr("kb", "graph", kb, "--from-fields")
            embedded = kgqr("kb", "embed", kb, "--field", "headline")
        finally:
            opensearch.cluster.put_settings(
                body={"transient": {"indices.id_field_data.enabled": None}})  # fmt: skip
        assert built.exit_code == 0, built.output
        genres = {d["id"]: {d["genre"]} for d in _documents() if "genre" in d}
        assert len(genres) > 2 and _genre_edges(neo4j_driver, kb) == genres
        assert embedded.exit_code == 0, embedded.output
        side = schema.vectors_index(kb)
        opensearch.indices.refresh(index=side)
        assert opensearch.count(index=side)["count"] == len(_documents())


def test_an_alias_that_routes_is_read_on_the_shards_it_routes_to(
    opensearch: Any, neo4j_driver: Any, redis_client: Any, ingest_worker: Any
) -> None:
    """A tenant's alias routes its searches to one shard, whose number need not be 0: a
    search through it counts one shard, and reading "shard 0" of it read nothing."""
    stores, kb, index = (opensearch, neo4j_driver, redis_client), "team-routed", "team-routed-v1"
    opensearch.indices.delete(index=index, ignore=[404])
    opensearch.indices.create(index=index, body={
        "settings": {"number_of_shards": 5},
        "mappings": {"properties": {"content": {"type": "text"},
                                    "genre": {"type": "keyword"}}}})  # fmt: skip
    genres = {f"r{n}": f"genre{n % 3}" for n in range(6)}
    for doc_id, genre in genres.items():
        opensearch.index(index=index, id=doc_id, routing="tenant-7",
                         body={"content": f"film {doc_id}", "genre": genre})  # fmt: skip
    opensearch.indices.refresh(index=index)
    opensearch.indices.put_alias(index=index, name=kb, body={"routing": "tenant-7"})
    drop_knowledge_base(*stores, kb)
    try:
        searched = opensearch.search(index=kb, body={"size": 0})
        assert searched["_shards"]["total"] == 1  # what made the shard numbers wrong
        attached = kgqr("kb", "attach", kb, "--index", kb, "--no-vectors",
                        "--entity-field", "genre")  # fmt: skip
        assert attached.exit_code == 0, attached.output
        built = kgqr("kb", "graph", kb, "--from-fields")
        assert built.exit_code == 0, built.output
        assert _genre_edges(neo4j_driver, kb) == {d: {g} for d, g in genres.items()}
    finally:
        drop_knowledge_base(*stores, kb)
        opensearch.indices.delete(index=index, ignore=[404])


def test_an_update_that_keeps_the_count_makes_another_job_over_the_index(
    opensearch: Any, neo4j_driver: Any, redis_client: Any
) -> None:
    """A job over an attached index was named by its document count: an update moves its
    document to the end of its shard's order, and a resumed job then skipped a document
    shifted into a chunk done before."""
    from ingest.sources.attached_graph import IndexChanged, IndexFieldsSource

    stores, kb = (opensearch, neo4j_driver, redis_client), "team-moved"
    with _attached_plain(stores, kb, kb, "--entity-field", "genre") as done:
        assert done.exit_code == 0, done.output
        fields = FieldMap(index=kb, entity_fields=["genre"])
        before = IndexFieldsSource(opensearch, fields).fingerprint()
        again = IndexFieldsSource(opensearch, fields)  # nothing written: the job, resumed
        assert again.fingerprint() == before
        opensearch.update(index=kb, id="m1", body={"doc": {"genre": "noir"}}, refresh=True)
        assert IndexFieldsSource(opensearch, fields).fingerprint() != before
        # The command that made the job re-sends its stalled chunks as that job, and not
        # once the index changed (its order did: a chunk done before would take a document).
        assert again.fingerprint() == before
        with pytest.raises(IndexChanged, match="was written to while this job ran"):
            again.check_unchanged()


def test_a_syncs_chunks_are_not_sent_again_once_the_index_changed_under_it(
    opensearch: Any, neo4j_driver: Any, redis_client: Any
) -> None:
    """An update in the sync's range moves its document out of it, and those after it one
    place earlier, into chunks done before: a stalled sync's re-send skipped them, and its
    checkpoints then moved past them, leaving them for a `--full` sync."""
    from ingest.index_shards import highest_seq_nos
    from ingest.index_sync import ChangedDocumentsSource
    from ingest.sources.attached_graph import IndexChanged

    stores, kb = (opensearch, neo4j_driver, redis_client), "team-synced-moved"
    with _attached_plain(stores, kb, kb, "--entity-field", "genre") as done:
        assert done.exit_code == 0, done.output
        fields = FieldMap(index=kb, entity_fields=["genre"])
        changes = ChangedDocumentsSource(opensearch, fields, {}, highest_seq_nos(opensearch, kb))
        assert list(changes.records())  # the job's chunks cut
        changes.check_unchanged()  # nothing written since: re-sent as cut
        # A new document, a live index's usual write, is numbered past the range: as cut.
        opensearch.index(index=kb, id="m9", body={"title": "Thief", "genre": "crime"},
                         refresh=True)  # fmt: skip
        changes.check_unchanged()
        opensearch.update(index=kb, id="m1", body={"doc": {"genre": "noir"}}, refresh=True)
        with pytest.raises(IndexChanged, match="was written to while this sync ran"):
            changes.check_unchanged()


def test_an_index_searched_through_its_default_pipeline_is_searched_through_it_still(
    opensearch: Any, neo4j_driver: Any, redis_client: Any, proxy_url: str
) -> None:
    """A team's default search pipeline (a tenant's filter, response processors) was
    replaced by kgqr's hybrid one for the hits, while the total, the caller's own query's,
    kept it. (This node's engine has neural-search's processors only, not the common
    module's filter_query: the pipeline here enriches neural queries, which the search
    sends none of; what is checked is that the search goes to the engine as sent.)"""
    stores, index, pipeline = (opensearch, neo4j_driver, redis_client), "team-piped", "enriching"
    enrich = {"neural_query_enricher": {"default_model_id": "none"}}
    opensearch.transport.perform_request(
        "PUT", f"/_search/pipeline/{pipeline}", body={"request_processors": [enrich]}
    )
    piped = {"index.search.default_pipeline": pipeline}
    try:
        with _attached_plain(stores, "team-piped", index, settings=piped) as done:
            assert done.exit_code == 0 and f"pipeline:    {pipeline}" in done.output, done.output
            answer = _once_attached(
                proxy_url, index, "graph", {"query": {"match": {"content": "plot"}}},
                learnt=lambda kgqr: "default search pipeline" in kgqr.get("passed_through", ""),
            )  # fmt: skip
            told = answer["kgqr"].get("passed_through", "")
            assert "default search pipeline" in told and pipeline not in told, answer["kgqr"]
            assert answer["hits"]["hits"], answer
            # Taken off (or set) later, the next sync sees it.
            opensearch.indices.put_settings(
                index=index, body={"index.search.default_pipeline": None}
            )
            synced = kgqr("kb", "sync", "team-piped")
            assert synced.exit_code == 0 and "pipeline is now none" in synced.output, synced.output
            rewritten = _once_attached(
                proxy_url, index, "graph", {"query": {"match": {"content": "plot"}}}
            )
            assert "passed_through" not in rewritten["kgqr"], rewritten["kgqr"]
    finally:
        opensearch.transport.perform_request("DELETE", f"/_search/pipeline/{pipeline}")


def test_a_text_field_the_team_adds_later_is_read_as_words_after_a_sync(
    opensearch: Any, neo4j_driver: Any, redis_client: Any, proxy_url: str
) -> None:
    """Its words were taken for another field's (kept as a filter: the graph added
    nothing beyond its matches), and so were every text field's in a field map an older
    kgqr recorded without them, until the KB was attached again."""
    stores, index, kb = (opensearch, neo4j_driver, redis_client), "team-grown", "team-grown"
    asked = {"query": {"match": {"summary": "crime heist"}}}
    with _attached_plain(stores, kb, index) as done:
        assert done.exit_code == 0, done.output
        opensearch.indices.put_mapping(index=index, body={"properties": {"summary": {
            "type": "text"}}})  # fmt: skip
        opensearch.update(index=index, id="m1", body={"doc": {"summary": "a crime heist"}},
                          refresh=True)  # fmt: skip
        before = _once_attached(proxy_url, index, "graph", asked)["kgqr"]
        assert "its own field" in before.get("kept_as_filter", ""), before
        synced = kgqr("kb", "sync", kb)
        assert synced.exit_code == 0 and "summary" in synced.output, synced.output
        words = lambda kgqr: "kept_as_filter" not in kgqr  # noqa: E731 (a proxy learns it)
        after = _once_attached(proxy_url, index, "graph", asked, learnt=words)["kgqr"]
        assert "kept_as_filter" not in after and "passed_through" not in after, after


@pytest.fixture(scope="module")
def attached(
    settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any,
    team_index: str, ingest_worker: Any,
) -> Iterator[tuple[str, tuple[Any, ...]]]:  # fmt: skip
    """The index attached, its graph built from the fixture's relations file and from its
    `genre` field; yields its state before kgqr touched anything."""
    drop_knowledge_base(opensearch, neo4j_driver, redis_client, KB)
    before = _index_state(opensearch)
    done = kgqr("kb", "attach", KB, "--index", team_index, "--model", settings.embedder.model,
                "--entity-field", "genre")  # fmt: skip
    assert done.exit_code == 0, done.output
    for source in (["--relations", str(FIXTURE / "relations.jsonl")], ["--from-fields"]):
        built = kgqr("kb", "graph", KB, *source)
        assert built.exit_code == 0, built.output
    yield team_index, before
    drop_knowledge_base(opensearch, neo4j_driver, redis_client, KB)


def test_the_graph_is_keyed_by_the_indexs_own_ids(
    neo4j_driver: Any, attached: tuple[str, Any]
) -> None:
    records, _, _ = neo4j_driver.execute_query(
        "MATCH (s:Node {kb: $kb})-[r]->(t:Node {kb: $kb}) "
        "RETURN s.id AS source, r.relation AS relation, t.id AS target, t.type AS type",
        kb=KB,
    )
    edges = {(r["source"], r["relation"], r["target"], r["type"]) for r in records}
    assert ("m1", "starring", "p2", "document") in edges
    assert ("m1", "genre", "entity:crime thriller", "entity") in edges
    assert len(edges) == 9 + 3  # the file's nine relations, one genre per movie


def test_both_kinds_of_knowledge_base_are_listed_and_shown(attached: tuple[str, Any]) -> None:
    listed = kgqr("kb", "list")
    line = next(line for line in listed.output.splitlines() if line.startswith(KB + " "))
    assert "attached" in line and INDEX in line
    shown = kgqr("kb", "show", KB)
    assert "entities:    genre" in shown.output and '"relations"' in shown.output
    assert "starring" in shown.output
    # Attaching made its graph's copy in OpenSearch, which every graph job since kept.
    assert f"graph copy:  {schema.graph_index(KB)}, 64 edges a node, complete" in shown.output


def _search(url: str, body: dict[str, Any], **params: str) -> dict[str, Any]:
    """A search of the attached index at `url`, answered 200."""
    answer = httpx.post(f"{url}/{INDEX}/_search", params=params, json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_a_search_on_the_attached_index_is_rewritten_in_its_own_fields(
    proxy_url: str, attached: tuple[str, Any], settings: Settings
) -> None:
    body = {"query": QUERY, "size": 5, "_source": ["headline"],
            "aggs": {"genres": {"terms": {"field": "genre"}}}}  # fmt: skip
    direct = _search(settings.opensearch.url, body)
    # The proxy may have started before the index was attached (this module's first search
    # through it is another's): it learns of the attach within a few seconds.
    through = _once_attached(proxy_url, INDEX, "graph", body)
    explained = through["kgqr"]
    assert explained["strategy"] == "graph", explained
    assert explained.get("fallback") is None, explained["fallback"]
    assert explained["details"]["seeds"] == ["m1"]  # Heat, the plain query's first hit
    assert "p2" in {node["id"] for node in explained["details"]["graph_nodes"]}
    bm25, knn, _boost = explained["final_query"]["query"]["hybrid"]["queries"]
    assert "content" in json.dumps(bm25) and set(knn["knn"]) == {"embedding"}
    # Totals and facets are the caller's query's, and the hits are among its matches.
    assert through["hits"]["total"] == direct["hits"]["total"]
    assert through["aggregations"] == direct["aggregations"]
    matches = _search(settings.opensearch.url, {"query": QUERY, "size": 100, "_source": False})
    matched = {hit["_id"] for hit in matches["hits"]["hits"]}
    assert {hit["_id"] for hit in through["hits"]["hits"]} <= matched
    assert all(set(hit["_source"]) <= {"headline"} for hit in through["hits"]["hits"])


def test_kgqr_eval_and_tune_auto_judge_an_attached_index_in_its_own_fields(
    proxy_url: str, attached: tuple[str, Any], tmp_path: Path
) -> None:
    """Judged queries on the team's index (kgqr-team-movies-documents does not exist: a
    search there would stop the run), in its own text fields, with the statistics."""
    judged = f"jsonl:{FIXTURE.parent / 'movie_judgments.jsonl'}"
    out = tmp_path / "run"
    run = kgqr("eval", judged, "--kb", KB, "--strategies", "base,graph", "--proxy", proxy_url,
               "--out", str(out))  # fmt: skip
    assert run.exit_code == 0, run.output
    report = json.loads(out.with_suffix(".json").read_text())
    by_strategy = {s["strategy"]: s for s in report["strategies"]}
    assert by_strategy["base"]["metrics"]["Hit@5"] == 1.0  # each query names its movie
    assert by_strategy["graph"]["fallbacks"] == 0
    assert {c["strategy"] for c in report["comparisons"]} == {"graph"}
    tuned = kgqr("tune", "auto", "--kb", KB, "--queries", judged, "--proxy", proxy_url,
                 "--dry-run", "--out", str(tmp_path / "tune"))  # fmt: skip
    assert tuned.exit_code == 0, tuned.output
    assert f"on 3 judged queries of {KB}" in tuned.output and "dry run" in tuned.output


def test_an_attached_kbs_rewrites_are_warmed_where_its_clients_search_it(
    settings: Settings, attached: tuple[str, Any], tmp_path: Path
) -> None:
    """They were searched in kgqr-KB-documents, which an attached KB does not have: a
    traceback, and nothing warmed that a search of the team's index would find."""
    listed = tmp_path / "queries.txt"
    listed.write_text("a heist crew in los angeles\n")
    with running_proxy(settings) as url:
        warm = ["rewrites", "warm", "--kb", KB, "--strategy", "graph", "--file", str(listed),
                "--proxy", url]  # fmt: skip
        first, again = kgqr(*warm), kgqr(*warm)
    assert first.exit_code == 0 and "1 rewritten and cached" in first.output, first.output
    assert again.exit_code == 0 and "1 already cached" in again.output, again.output


def test_a_vector_query_from_a_retriever_is_rewritten_with_the_graph(
    proxy_url: str, attached: tuple[str, Any], settings: Settings
) -> None:
    """What LangChain's, Haystack's and LlamaIndex's retrievers send: a `knn` query with a
    vector their client embedded. The graph strategy takes its first hit and the
    caller's vector (kgqr embeds nothing); Collateral (m2), which names neither Tom
    Cruise nor a hitman, is added from Tom Cruise (p3)."""
    vector = get_embedder(settings.embedder.model).encode_queries(["Tom Cruise hitman"])[0]
    body = {"size": 4, "query": {"knn": {"embedding": {"vector": vector.tolist(), "k": 4}}}}
    params = {"kgqr.strategy": "graph", "kgqr.explain": "true"}
    answer = _search(proxy_url, body, **params)
    explained = answer["kgqr"]
    assert explained.get("fallback") is None, explained["fallback"]
    assert explained["signals"] == ["knn", "graph"]
    assert explained["details"]["seeds"] == ["p3"]
    ranked = [hit["_id"] for hit in answer["hits"]["hits"]]
    direct = _search(settings.opensearch.url, body)
    assert (
        ranked[0] == "p3"
        and "m2" in ranked
        and "m2" not in [h["_id"] for h in direct["hits"]["hits"]]
    )
    asked_llm = _search(proxy_url, body, **{**params, "kgqr.strategy": "hyde"})
    assert asked_llm["kgqr"]["passed_through"].startswith("a k-NN query carries a vector")


class GenreFacets(FacetedSearch):  # type: ignore[misc]
    """A search UI's faceted search over the team's index."""

    index = INDEX
    fields = ("content", "headline")
    facets = {"genre": TermsFacet(field="genre")}  # noqa: RUF012 (how FacetedSearch reads it)


@pytest.mark.parametrize("chosen", [{}, {"genre": "crime thriller"}])
def test_a_faceted_search_keeps_its_facets_and_totals_and_only_the_order_changes(
    settings: Settings, proxy_url: str, attached: tuple[str, Any], chosen: dict[str, str]
) -> None:
    def run(url: str, graph: bool) -> Any:
        class Through(GenreFacets):  # the client is a class attribute there
            using = OpenSearch(hosts=[url], timeout=300)  # type: ignore[assignment]

            def search(self) -> Any:  # through kgqr, asking for `graph`
                found = super().search()
                return found.extra(ext={"kgqr": {"strategy": "graph"}}) if graph else found

        return Through("an American actor in a crime film", filters=chosen).execute()

    direct, through = run(settings.opensearch.url, False), run(proxy_url, True)
    assert through.facets.genre == direct.facets.genre and direct.facets.genre
    assert through.hits.total.to_dict() == direct.hits.total.to_dict()
    assert sorted(h.meta.id for h in through.hits) == sorted(h.meta.id for h in direct.hits)


def test_the_front_sends_searches_on_the_attached_index_to_kgqr(
    settings: Settings, proxy_url: str, attached: tuple[str, Any]
) -> None:
    """A client pointed at the front with only its URL changed: no kgqr in the URL (the
    options ride in the body), so only the front's routes for attached indices take it to
    kgqr; another index still goes straight to the engine."""
    body = {"query": QUERY, "ext": {"kgqr": {"strategy": "graph", "explain": True}}}
    with running_front(settings, "127.0.0.1", free_port(), port_of(proxy_url, 0)) as front:
        answer = _search(front, body)
        assert answer["kgqr"]["strategy"] == "graph" and answer["kgqr"]["details"]["seeds"]
        other = httpx.post(f"{front}/{schema.META_INDEX}/_search", json={"size": 0}, timeout=60)
        assert "kgqr" not in other.json()


def test_nothing_is_written_to_the_attached_index(
    opensearch: Any, proxy_url: str, attached: tuple[str, Any]
) -> None:
    _search(proxy_url, {"query": QUERY}, **{"kgqr.strategy": "graph"})
    assert _index_state(opensearch) == attached[1]


def test_an_index_cannot_be_attached_as_two_knowledge_bases(
    settings: Settings, attached: tuple[str, Any]
) -> None:
    twice = kgqr("kb", "attach", "team-twice", "--index", INDEX, "--model", settings.embedder.model)
    assert twice.exit_code == 1 and f"already attached as '{KB}'" in twice.output


PLAIN_KB, PLAIN_INDEX = "team-plain", "team-movies-plain"


def _index_without_vectors(opensearch: Any, index: str, shards: int = 1) -> None:
    """The fixture's documents in an index with no vector field (as opensearch-dsl writes
    one)."""
    opensearch.indices.delete(index=index, ignore=[404])
    properties = {k: v for k, v in MAPPING["mappings"]["properties"].items() if k != "embedding"}
    body = {"settings": {"number_of_shards": shards}, "mappings": {"properties": properties}}
    opensearch.indices.create(index=index, body=body)
    for document in _documents():
        opensearch.index(index=index, id=document.pop("id"), body=document)
    opensearch.indices.refresh(index=index)


@contextmanager
def _attached_plain(
    stores: tuple[Any, Any, Any], kb: str, index: str, *options: str,
    notes: dict[str, str] | None = None, settings: dict[str, str] | None = None,
    shards: int = 1,
) -> Iterator[Result]:  # fmt: skip
    """The fixture's documents in an index of their own with no vectors (and `notes`, a
    text field, on the documents named; the index `settings` given), attached with
    `options`, removed after."""
    opensearch, neo4j_driver, redis_client = stores
    _index_without_vectors(opensearch, index, shards)
    if settings:
        opensearch.indices.put_settings(index=index, body=settings)
    if notes:
        opensearch.indices.put_mapping(
            index=index, body={"properties": {"notes": {"type": "text"}}}
        )
        for doc_id, text in notes.items():
            opensearch.update(index=index, id=doc_id, body={"doc": {"notes": text}})
        opensearch.indices.refresh(index=index)
    drop_knowledge_base(opensearch, neo4j_driver, redis_client, kb)
    try:
        yield kgqr("kb", "attach", kb, "--index", index, *options)
    finally:
        drop_knowledge_base(opensearch, neo4j_driver, redis_client, kb)
        opensearch.indices.delete(index=index, ignore=[404])


@pytest.fixture(scope="module")
def attached_without_vectors(
    opensearch: Any, neo4j_driver: Any, redis_client: Any, ingest_worker: Any
) -> Iterator[str]:
    """The same documents in an index with no vector field (BM25 only, as opensearch-dsl
    writes one), attached, its graph from the relations file."""
    _index_without_vectors(opensearch, PLAIN_INDEX)
    drop_knowledge_base(opensearch, neo4j_driver, redis_client, PLAIN_KB)
    done = kgqr("kb", "attach", PLAIN_KB, "--index", PLAIN_INDEX)
    assert done.exit_code == 0 and "vectors:     none" in done.output, done.output
    built = kgqr("kb", "graph", PLAIN_KB, "--relations", str(FIXTURE / "relations.jsonl"))
    assert built.exit_code == 0, built.output
    yield PLAIN_INDEX
    drop_knowledge_base(opensearch, neo4j_driver, redis_client, PLAIN_KB)
    opensearch.indices.delete(index=PLAIN_INDEX, ignore=[404])


def _once_attached(
    proxy_url: str,
    index: str,
    strategy: str,
    body: dict[str, Any] | None = None,
    params: dict[str, str] | None = None,
    learnt: Callable[[dict[str, Any]], bool] = lambda kgqr: "passed_through" not in kgqr,
) -> dict[str, Any]:
    """The answer, explained, to a search through kgqr once the proxy has learnt the index
    is attached (`learnt`, of the explain: it is rewritten)."""
    asked = {"kgqr.strategy": strategy, "kgqr.explain": "true", **(params or {})}
    deadline = time.monotonic() + 2 * MISS_TTL_S  # a proxy learns of a new attach this soon
    while True:
        answer: dict[str, Any] = httpx.post(f"{proxy_url}/{index}/_search", params=asked,
                                            json=body, timeout=120).json()  # fmt: skip
        if learnt(answer["kgqr"]) or time.monotonic() > deadline:
            return answer
        time.sleep(0.5)


def _tom_cruise_hitman(proxy_url: str, index: str, strategy: str) -> dict[str, Any]:
    """The answer, explained, to a search for Collateral by words it lacks."""
    body = {"query": {"match": {"content": "Tom Cruise hitman"}}, "size": 5}
    return _once_attached(proxy_url, index, strategy, body)


@pytest.mark.parametrize("strategy", ["graph", "graph_walk"])
def test_without_vectors_the_graph_strategies_rank_over_bm25(
    proxy_url: str, attached_without_vectors: str, strategy: str
) -> None:
    """Collateral (m2) names neither Tom Cruise nor a hitman: BM25 cannot find it, the
    graph adds it from Tom Cruise (p3), and the explain says which signals ranked."""
    answer = _tom_cruise_hitman(proxy_url, PLAIN_INDEX, strategy)
    explained = answer["kgqr"]
    assert explained.get("fallback") is None, explained["fallback"]
    assert explained.get("signals") == ["bm25", "graph"], explained
    queries = explained["final_query"]["query"]["hybrid"]["queries"]
    assert len(queries) == 2 and "knn" not in json.dumps(queries)
    ranked = [hit["_id"] for hit in answer["hits"]["hits"]]
    assert ranked[0] == "p3" and "m2" in ranked, explained["details"]
    assert answer["hits"]["total"]["value"] == len(ranked)  # p3 and what the graph added


def test_kgqrs_own_vectors_rank_an_index_that_has_none_and_follow_its_changes(
    settings: Settings, opensearch: Any, attached_without_vectors: str
) -> None:
    """`kgqr kb embed` writes kgqr's side index, never the team's; searches then rank the
    caller's matches by those vectors too. A document the app changed since it was embedded
    gets no vector score until `kgqr kb sync` embeds it again; a deleted one's goes."""
    before = opensearch.indices.get_mapping(index=PLAIN_INDEX)
    done = kgqr("kb", "embed", PLAIN_KB, "--field", "headline", "--field", "content",
                "--model", settings.embedder.model)  # fmt: skip
    assert done.exit_code == 0 and "embedded 8 documents" in done.output, done.output
    assert opensearch.indices.get_mapping(index=PLAIN_INDEX) == before
    side = schema.vectors_index(PLAIN_KB)
    opensearch.indices.refresh(index=side)
    assert opensearch.count(index=side)["count"] == 8
    shown = kgqr("kb", "show", PLAIN_KB)
    assert "kgqr's side index" in shown.output, shown.output

    def explained(url: str) -> dict[str, Any]:
        body = {"query": {"match": {"content": "an actor who played a hitman"}}, "size": 5}
        params = {"kgqr.strategy": "base", "kgqr.explain": "true"}
        answer = httpx.post(f"{url}/{PLAIN_INDEX}/_search", params=params, json=body,
                            timeout=120).json()  # fmt: skip
        assert answer["kgqr"].get("fallback") is None, answer["kgqr"]
        return dict(answer["kgqr"])

    with running_proxy(settings) as url:  # a proxy that reads the KB's meta afresh
        first = explained(url)
        assert first["signals"] == ["bm25", "knn"], first
        vectors = first["side_vectors"]
        assert vectors["index"] == side and vectors["scored"] == vectors["candidates"] >= 3
        opensearch.update(index=PLAIN_INDEX, id="p3", refresh=True,
                          body={"doc": {"content": "Tom Cruise played a hitman."}})  # fmt: skip
        stale = explained(url)["side_vectors"]
        assert stale["scored"] == stale["candidates"] - 1  # p3's text is not what was embedded
        opensearch.delete(index=PLAIN_INDEX, id="p2", refresh=True)
        synced = kgqr("kb", "sync", PLAIN_KB)
        assert synced.exit_code == 0 and "1 deleted" in synced.output, synced.output
        fresh = explained(url)["side_vectors"]
        assert fresh["scored"] == fresh["candidates"], fresh
    opensearch.indices.refresh(index=side)
    assert opensearch.count(index=side)["count"] == 7  # p2's vector went with it


def test_matches_in_fields_the_map_does_not_search_stay_hits_and_the_total_agrees(
    opensearch: Any, neo4j_driver: Any, redis_client: Any, proxy_url: str
) -> None:
    """Attached with `--text headline`, searched in `content`: BM25 through kgqr reads the
    headlines, where the caller's words are not, and every one of the caller's matches is
    still a hit, as many as the total counts."""
    stores, index = (opensearch, neo4j_driver, redis_client), "team-movies-headlines"
    with _attached_plain(stores, "team-headlines", index, "--text", "headline") as done:
        assert done.exit_code == 0, done.output
        body = {"query": {"match": {"content": "an American actor"}}, "size": 10}
        direct = opensearch.search(index=index, body=body)["hits"]
        assert direct["total"]["value"] >= 3
        answer = _once_attached(proxy_url, index, "base", body)
        assert answer["kgqr"].get("fallback") is None, answer["kgqr"]
        hits = {hit["_id"] for hit in answer["hits"]["hits"]}
        assert hits == {hit["_id"] for hit in direct["hits"]}
        assert answer["hits"]["total"]["value"] == direct["total"]["value"] == len(hits)


@pytest.mark.parametrize(
    ("body", "params"),
    [
        ({"query": {"query_string": {"query": "remastered"}}, "size": 10}, {}),
        ({"query": {"multi_match": {"query": "remastered"}}, "size": 10}, {}),
        (None, {"q": "remastered", "size": "10"}),
    ],
)  # fmt: skip
def test_a_search_naming_no_field_keeps_its_matches_in_fields_beside_the_suggested(
    opensearch: Any, neo4j_driver: Any, redis_client: Any, proxy_url: str,
    body: dict[str, Any] | None, params: dict[str, str],
) -> None:  # fmt: skip
    """Attached as suggested (title `headline`, body `content`), searched in no field: the
    engine reads every field, and kgqr's BM25 read the suggested two only, so a document
    whose `notes` alone held the word was left out of the hits the total still counted."""
    stores, index = (opensearch, neo4j_driver, redis_client), "team-movies-notes"
    # Heat (m1) has the word in its body, Collateral (m2) in its notes alone.
    with _attached_plain(stores, "team-notes", index, notes={"m2": "remastered in 2024"}) as done:
        assert done.exit_code == 0 and "title/body:  headline / content" in done.output, done.output
        opensearch.update(index=index, id="m1", refresh=True,
                          body={"doc": {"content": "Heat, remastered."}})  # fmt: skip
        direct = opensearch.search(index=index, body=body, params=params)["hits"]
        assert {hit["_id"] for hit in direct["hits"]} == {"m1", "m2"}
        answer = _once_attached(proxy_url, index, "base", body, params)
        assert answer["kgqr"].get("fallback") is None, answer["kgqr"]
        assert {hit["_id"] for hit in answer["hits"]["hits"]} == {"m1", "m2"}
        assert answer["hits"]["total"] == direct["total"]


def test_the_graphs_seeds_are_read_in_the_fields_the_callers_query_names(
    opensearch: Any, neo4j_driver: Any, redis_client: Any, proxy_url: str, ingest_worker: Any
) -> None:
    """Attached to follow the caller's fields, searched in `notes`: the search read notes,
    but the graph's seeds were read in the suggested title and body, where the words are
    not ("no seeds": the rewrite fell back), or were another document's."""
    stores, index, kb = (opensearch, neo4j_driver, redis_client), "team-movies-seeds", "team-seeds"
    with _attached_plain(stores, kb, index, "--entity-field", "genre",
                         notes={"m2": "remastered in 2024"}) as done:  # fmt: skip
        assert done.exit_code == 0, done.output
        assert kgqr("kb", "graph", kb, "--from-fields").exit_code == 0
        body = {"query": {"match": {"notes": "remastered"}}, "size": 5}
        explained = _once_attached(proxy_url, index, "graph", body)["kgqr"]
        assert explained["fallback"] is None, explained["fallback"]
        assert explained["details"]["seeds"] == ["m2"]
        # The same words in the body: another search, not the cached one.
        body = {"query": {"match": {"content": "remastered"}}, "size": 5}
        explained = _once_attached(proxy_url, index, "graph", body)["kgqr"]
        assert explained["fallback"] is not None and not explained["cached"]


KEYED_KB, KEYED_INDEX = "team-keyed", "team-movies-keyed"


@pytest.fixture(scope="module")
def keyed_index(
    opensearch: Any, neo4j_driver: Any, redis_client: Any, ingest_worker: Any, tmp_path_factory: Any
) -> Iterator[dict[str, str]]:
    """The documents under ids the engine made up, each naming itself by `code` (the
    fixture's ids) and its sequel by `next` (a reference field of codes), attached with
    `--id-field code`; yields code -> `_id`."""
    opensearch.indices.delete(index=KEYED_INDEX, ignore=[404])
    properties = {k: v for k, v in MAPPING["mappings"]["properties"].items() if k != "embedding"}
    properties |= {"code": {"type": "keyword"}, "next": {"type": "keyword"}}
    opensearch.indices.create(index=KEYED_INDEX, body={"mappings": {"properties": properties}})
    ids = {}
    for document in _documents():
        code = document.pop("id")
        sequel = {"next": "m2"} if code == "m1" else {}
        written = opensearch.index(index=KEYED_INDEX, body={**document, "code": code, **sequel})
        ids[code] = written["_id"]
    opensearch.index(index=KEYED_INDEX, body={"headline": "A twin", "code": "p1"})
    opensearch.indices.refresh(index=KEYED_INDEX)
    relations = tmp_path_factory.mktemp("keyed") / "relations.jsonl"
    lines = (FIXTURE / "relations.jsonl").read_text().splitlines()
    lines += ['{"source": "m1", "relation": "remade_as", "target": "m404"}']
    relations.write_text("\n".join(lines) + "\n")
    drop_knowledge_base(opensearch, neo4j_driver, redis_client, KEYED_KB)
    done = kgqr("kb", "attach", KEYED_KB, "--index", KEYED_INDEX, "--id-field", "code",
                "--reference-field", "next")  # fmt: skip
    assert done.exit_code == 0 and "ids:         code" in done.output, done.output
    for source in (["--relations", str(relations)], ["--from-fields"]):
        built = kgqr("kb", "graph", KEYED_KB, *source)
        assert built.exit_code == 0, built.output
    yield ids
    drop_knowledge_base(opensearch, neo4j_driver, redis_client, KEYED_KB)
    opensearch.indices.delete(index=KEYED_INDEX, ignore=[404])


def test_a_graph_named_by_the_teams_own_keys_is_keyed_by_id(
    neo4j_driver: Any, keyed_index: dict[str, str]
) -> None:
    """The relations file and the `next` field name documents by `code`; the graph holds
    their `_id`s. A code no document has (m404), or two have (p1: a twin), makes no edge:
    those records are set aside with their reasons, and the rest land."""
    records, _, _ = neo4j_driver.execute_query(
        "MATCH (s:Node {kb: $kb})-[r]->(t:Node {kb: $kb}) "
        "RETURN s.id AS source, r.relation AS relation, t.id AS target",
        kb=KEYED_KB,
    )
    edges = {(r["source"], r["relation"], r["target"]) for r in records}
    ids = keyed_index
    assert (ids["m1"], "starring", ids["p2"]) in edges
    assert (ids["m1"], "next", ids["m2"]) in edges
    assert not any("p1" in edge or ids["p1"] in edge for edge in edges)  # two documents
    assert len(edges) == 9 - 3 + 1  # the file's nine, less the three to p1; one sequel
    shown = kgqr("ingest", "rejected", "--kb", KEYED_KB)
    assert shown.exit_code == 0, shown.output
    assert "target code 'm404' names no document" in shown.output
    assert "target code 'p1' names 2 documents" in shown.output


def test_a_graph_may_be_named_by_numeric_keys(
    opensearch: Any, neo4j_driver: Any, redis_client: Any, ingest_worker: Any
) -> None:
    """A table's rows keep their row number (`row`, a long) and their sequel's (`next`):
    attach refused both as "mapped as long, not keyword", though the graph's key lookup
    matches numbers as the engine does."""
    index, kb = "team-movies-rows", "team-rows"
    opensearch.indices.delete(index=index, ignore=[404])
    numbers = {"headline": {"type": "text"}, "row": {"type": "long"}, "next": {"type": "long"}}
    opensearch.indices.create(index=index, body={"mappings": {"properties": numbers}})
    for doc_id, row, sequel in (("a", 1, 2), ("b", 2, None)):
        body = {"headline": f"film {row}", "row": row, **({"next": sequel} if sequel else {})}
        opensearch.index(index=index, id=doc_id, body=body, refresh=True)
    drop_knowledge_base(opensearch, neo4j_driver, redis_client, kb)
    try:
        done = kgqr("kb", "attach", kb, "--index", index, "--id-field", "row",
                    "--reference-field", "next")  # fmt: skip
        assert done.exit_code == 0, done.output
        assert kgqr("kb", "graph", kb, "--from-fields").exit_code == 0
        records, _, _ = neo4j_driver.execute_query(
            "MATCH (s:Node {kb: $kb})-[r]->(t:Node {kb: $kb}) RETURN s.id, r.relation, t.id", kb=kb
        )
        assert [tuple(record.values()) for record in records] == [("a", "next", "b")]
    finally:
        drop_knowledge_base(opensearch, neo4j_driver, redis_client, kb)
        opensearch.indices.delete(index=index, ignore=[404])


def test_a_search_on_a_keyed_index_is_lifted_by_its_graph(
    proxy_url: str, keyed_index: dict[str, str]
) -> None:
    """As without keys: BM25 finds Tom Cruise's page, the graph adds Collateral, both by
    the `_id`s the engine gave them."""
    answer = _tom_cruise_hitman(proxy_url, KEYED_INDEX, "graph")
    assert answer["kgqr"].get("fallback") is None, answer["kgqr"]
    ranked = [hit["_id"] for hit in answer["hits"]["hits"]]
    assert ranked[0] == keyed_index["p3"] and keyed_index["m2"] in ranked, answer["kgqr"]


def test_sync_translates_the_keys_a_changed_document_names(
    opensearch: Any, neo4j_driver: Any, keyed_index: dict[str, str]
) -> None:
    """... and gives a KB without a graph copy (attached before copies were) a whole one."""
    ids = keyed_index
    opensearch.update(index=KEYED_INDEX, id=ids["m3"], body={"doc": {"next": "m1"}},
                      refresh=True)  # fmt: skip
    opensearch.indices.delete(index=schema.graph_index(KEYED_KB))
    synced = kgqr("kb", "sync", KEYED_KB)
    assert synced.exit_code == 0 and "no graph copy" in synced.output, synced.output
    copy = graph_projection.state(opensearch, KEYED_KB)
    assert copy is not None and copy.complete
    assert graph_copy_matches_neo4j(opensearch, neo4j_driver, KEYED_KB)[ids["m3"]]
    records, _, _ = neo4j_driver.execute_query(
        "MATCH (s:Node {kb: $kb, id: $id})-[r {relation: 'next'}]->(t) RETURN t.id AS target",
        kb=KEYED_KB, id=ids["m3"],
    )  # fmt: skip
    assert [r["target"] for r in records] == [ids["m1"]]


def _extracted(prompt: str) -> str:
    """The stand-in LLM: Tom Cruise's page and Collateral's name one entity (Collateral);
    TTR sentences for whatever it was asked."""
    if "Tom Cruise" in prompt and "triples" in prompt.lower() and "sentences" not in prompt:
        return json.dumps({"triples": [["Tom Cruise", "played a hitman in", "Collateral"]]})
    if "cab driver" in prompt and "sentences" not in prompt:
        return json.dumps({"triples": [["Collateral", "is about", "a cab driver"]]})
    if "sentences" in prompt:
        return json.dumps({"sentences": ["A sentence read from the document."]})
    return json.dumps({"triples": []})


def test_the_llm_reads_triples_from_chosen_text_fields_into_the_graph_only(
    settings: Settings, opensearch: Any, neo4j_driver: Any, attached: tuple[str, Any]
) -> None:
    """`kgqr kb graph --extract content`'s source and task, with a stand-in LLM: the
    triples' entities hang off the index's own documents, the triples (with their source
    document) go to kgqr's own triples index, and the team's index is not written."""
    from ingest.chunk_ingest import ingest_chunk
    from ingest.sources.attached_graph import IndexTextSource
    from ingest.worker_resources import WorkerResources
    from tests.integration.recording_llm import recording_llm

    refused = kgqr("kb", "graph", KB, "--extract", "genre")
    assert refused.exit_code == 1 and "text field [genre] is mapped as keyword" in refused.output
    meta = kb_meta.load(opensearch, KB)
    assert meta is not None and meta.attached is not None
    source = IndexTextSource(opensearch, meta.attached, ["content"])
    records = [record.model_dump(mode="json") for record in source.records()]
    assert {r["kind"] for r in records} == {"extract"} and len(records) == 8
    assert next(r for r in records if r["id"] == "p3")["title"] == "Tom Cruise"
    before = _index_state(opensearch)
    with recording_llm(_extracted) as (url, prompts):
        stand_in = settings.replaced({"llm_base_url": url, "llm_model": f"stand-in-{time.time()}"})
        resources = WorkerResources(stand_in)
        # On record as a task's job is: a chunk stops reading passages once its job is gone.
        job_id = f"extract-{time.time()}"
        resources.jobs.start(job_id, KB, "test")
        try:
            outcome = ingest_chunk(resources, job_id, KB, 0, records)
        finally:
            resources.jobs.forget(job_id)
            resources.neo4j.close()
    assert outcome.counts["triples"] == 2 and len(prompts) == 8 + 2  # a TTR call per hit
    found, _, _ = neo4j_driver.execute_query(
        "MATCH (p:Node {kb: $kb})-[m:MENTIONS]->(e:Node {kb: $kb, id: 'entity:collateral'}) "
        "RETURN p.id AS doc, p.type AS type, m.field_evidence AS evidence ORDER BY doc", kb=KB,
    )  # fmt: skip
    assert [(r["doc"], r["type"]) for r in found] == [("m2", "document"), ("p3", "document")]
    opensearch.indices.refresh(index=schema.triples_index(KB))
    triples = opensearch.search(index=schema.triples_index(KB), body={"size": 10})["hits"]["hits"]
    assert sorted(hit["_source"]["passage_id"] for hit in triples) == ["m2", "p3"]
    # Each edge and triple needs a caller to see the fields it was read from (the content,
    # and the headline the LLM read as its title) as they were read.
    for doc, stored in [*((r["doc"], r["evidence"]) for r in found),
                        *((h["_source"]["passage_id"], h["_source"]["field_evidence"])
                          for h in triples)]:  # fmt: skip
        evidence = FieldEvidence.stored(stored)
        assert evidence.document == doc and evidence.fields == ("content", "headline")
        as_read = opensearch.get(index=INDEX, id=doc)["_source"]
        assert evidence.shown_in(as_read)
        assert not evidence.shown_in({**as_read, "content": "another text"})
    assert _index_state(opensearch) == before


def _genre_edges(neo4j_driver: Any, kb: str = KB) -> dict[str, set[str]]:
    records, _, _ = neo4j_driver.execute_query(
        "MATCH (s:Node {kb: $kb})-[r {relation: 'genre'}]->(t) RETURN s.id AS doc, t.name AS genre",
        kb=kb,
    )
    edges: dict[str, set[str]] = {}
    for record in records:
        edges.setdefault(record["doc"], set()).add(record["genre"])
    return edges


def test_sync_brings_the_apps_adds_changes_and_deletes_into_the_graph(
    opensearch: Any, neo4j_driver: Any, attached: tuple[str, Any], tmp_path: Path
) -> None:
    first = kgqr("kb", "sync", KB)  # no checkpoint yet: every document is read
    assert first.exit_code == 0 and "8 documents read" in first.output, first.output
    # The team's own statement, in a relations file, that m2 is a neo-noir: named like the
    # genre field, but not read from it, so m2's change leaves it alone.
    stated = tmp_path / "stated.jsonl"
    stated.write_text('{"source": "m2", "relation": "genre", "entity": "neo-noir"}\n')
    assert kgqr("kb", "graph", KB, "--relations", str(stated)).exit_code == 0
    # The team's app writes through its own client, as it always has.
    opensearch.index(index=INDEX, id="m4", body={
        "headline": "Thief", "content": "plot: A safecracker takes one last job.",
        "genre": "crime thriller"})  # fmt: skip
    opensearch.update(index=INDEX, id="m2", body={"doc": {"genre": "crime thriller"}})
    opensearch.delete(index=INDEX, id="p3")
    opensearch.indices.refresh(index=INDEX)
    synced = kgqr("kb", "sync", KB)
    assert synced.exit_code == 0, synced.output
    assert "1 deleted" in synced.output
    genres = _genre_edges(neo4j_driver)
    assert genres["m4"] == {"crime thriller"}
    assert genres["m2"] == {"crime thriller", "neo-noir"}  # its old field's edge is gone
    records, _, _ = neo4j_driver.execute_query(
        "MATCH (n:Node {kb: $kb, id: 'p3'}) RETURN count(n) AS n", kb=KB
    )
    assert records[0]["n"] == 0  # Tom Cruise's node, and every edge it had, removed
    # ... from the graph's copy in OpenSearch too, which searches read: no edge to p3 is
    # left for a search to follow.
    copied = graph_copy_matches_neo4j(opensearch, neo4j_driver, KB)
    assert "p3" not in copied and not any("p3" in linked for linked in copied.values())
    again = kgqr("kb", "sync", KB)  # rereads the last writes (idempotent), deletes nothing
    assert again.exit_code == 0 and "0 deleted" in again.output, again.output
    assert _genre_edges(neo4j_driver) == genres


@pytest.mark.parametrize("written_after", [0, index_sync.OVERLAP + 200],
                         ids=["fewer_writes", "more_writes"])  # fmt: skip
def test_an_index_made_again_under_its_name_is_synced_from_its_start(
    opensearch: Any, neo4j_driver: Any, redis_client: Any, ingest_worker: Any, written_after: int
) -> None:
    """Deleted and created again (a reindex back to its name, a restore), the index numbers
    its writes from 0 again, and sync read on from the old checkpoint: every document
    written up to it never reached the graph, and the sync said all was well. With fewer
    writes than before its numbers tell (below the checkpoint); with more, its uuid."""
    stores, index, kb = (
        (opensearch, neo4j_driver, redis_client),
        f"team-movies-remade-{written_after}",
        f"team-remade-{written_after}",
    )
    with _attached_plain(stores, kb, index, "--entity-field", "genre") as done:
        assert done.exit_code == 0, done.output

        def rewrites(count: int) -> None:  # the app's, numbering the shard's writes up
            drafts = ({"_index": index, "_id": "m3", "headline": f"The Insider {n}"}
                      for n in range(count))  # fmt: skip
            bulk(opensearch, drafts, refresh=True)

        rewrites(index_sync.OVERLAP + 100)  # past what a sync reads again
        assert kgqr("kb", "sync", kb).exit_code == 0
        _index_without_vectors(opensearch, index)  # made again
        opensearch.index(index=index, id="m9", refresh=True,
                         body={"headline": "Thief", "genre": "heist film"})  # fmt: skip
        rewrites(written_after)
        synced = kgqr("kb", "sync", kb)
        assert synced.exit_code == 0 and "read from its start" in synced.output, synced.output
        assert _genre_edges(neo4j_driver, kb)["m9"] == {"heist film"}


def test_what_lands_while_a_sync_runs_stays_and_a_record_that_went_is_not_made_again(
    opensearch: Any, attached: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync wrote back, at its end, the whole record it had read at its start: a
    rollback of the default made meanwhile was undone (a re-attach's map and a detach
    too: the record was made again). It now writes its checkpoints alone."""
    from ingest import index_sync

    kb_meta.set_default(opensearch, KB, "base", {}, "before the sync", "test")
    kb_meta.set_default(opensearch, KB, "graph", {}, "before the sync, and wrong", "test")
    deleted_documents = index_sync.deleted_documents

    def rolled_back_meanwhile(*args: Any) -> Any:
        kb_meta.roll_back_default(opensearch, KB, None, "test")
        return deleted_documents(*args)

    monkeypatch.setattr(index_sync, "deleted_documents", rolled_back_meanwhile)
    try:
        assert kgqr("kb", "sync", KB).exit_code == 0
        after = kb_meta.load(opensearch, KB)
        assert after is not None and after.synced
        assert after.defaults[-1].reason.startswith("rollback to v"), after.defaults[-1]
    finally:
        kb_meta.set_default(opensearch, KB, None, {}, "cleared after the test", "test")
    with pytest.raises(kb_meta.KnowledgeBaseGone):
        kb_meta.record(opensearch, "team-never-recorded", {"synced": {"x/0": 1}})
    assert not opensearch.exists(index=schema.META_INDEX, id="team-never-recorded")


def test_a_filtered_alias_is_synced_through_its_filter_and_one_index_only(
    opensearch: Any, neo4j_driver: Any, redis_client: Any, ingest_worker: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Sync read the concrete index behind an attached alias, around the alias's filter:
    the documents the team's searches never see went into the graph (and out again at
    the next sync, as deleted). An alias that names a second index since is refused."""
    from ingest import index_sync

    kb, alias, index, other = (
        "team-filtered",
        "team-filtered",
        "team-filtered-v1",
        "team-filtered-v2",
    )
    mapping = {"mappings": {"properties": {"content": {"type": "text"},
                                           "genre": {"type": "keyword"},
                                           "public": {"type": "boolean"}}}}  # fmt: skip
    for name in (index, other):
        opensearch.indices.delete(index=name, ignore=[404])
        opensearch.indices.create(index=name, body=mapping)
    opensearch.index(index=index, id="a1", body={"content": "A heist film.", "genre": "crime",
                                                 "public": True})  # fmt: skip
    opensearch.index(index=index, id="a2", body={"content": "An internal memo.",
                                                 "genre": "secret", "public": False})  # fmt: skip
    opensearch.indices.refresh(index=index)
    opensearch.indices.put_alias(index=index, name=alias,
                                 body={"filter": {"term": {"public": True}}})  # fmt: skip
    drop_knowledge_base(opensearch, neo4j_driver, redis_client, kb)
    try:
        attached = kgqr("kb", "attach", kb, "--index", alias, "--no-vectors",
                        "--entity-field", "genre")  # fmt: skip
        assert attached.exit_code == 0, attached.output
        synced = kgqr("kb", "sync", kb)
        assert synced.exit_code == 0, synced.output
        records, _, _ = neo4j_driver.execute_query(
            "MATCH (n:Node {kb: $kb}) RETURN n.id AS id ORDER BY id", kb=kb
        )
        assert [record["id"] for record in records] == ["a1", "entity:crime"]
        opensearch.indices.put_alias(index=other, name=alias)
        refused = kgqr("kb", "sync", kb)
        assert refused.exit_code == 1 and "names several indices" in refused.output
        opensearch.indices.delete_alias(index=other, name=alias)
        # Detached while a sync runs: its end records nothing, and makes no graph copy again.
        deleted_documents = index_sync.deleted_documents

        def detached_meanwhile(*args: Any) -> Any:
            drop_knowledge_base(opensearch, neo4j_driver, redis_client, kb)
            return deleted_documents(*args)

        monkeypatch.setattr(index_sync, "deleted_documents", detached_meanwhile)
        gone = kgqr("kb", "sync", kb)
        assert gone.exit_code == 1 and "no longer recorded" in gone.output, gone.output
        assert not opensearch.exists(index=schema.META_INDEX, id=kb)
        assert not opensearch.indices.exists(index=schema.graph_index(kb))
    finally:
        drop_knowledge_base(opensearch, neo4j_driver, redis_client, kb)
        for name in (index, other):
            opensearch.indices.delete(index=name, ignore=[404])


def test_sync_follow_keeps_up_until_stopped(
    opensearch: Any, neo4j_driver: Any, attached: tuple[str, Any]
) -> None:
    follow = subprocess.Popen(
        [sys.executable, "-c", "from kgqr_ops.cli import main; main()", "kb", "sync", KB,
         "--follow", "--interval", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        written = {"headline": "Miami Vice", "content": "plot: Two detectives.",
                   "genre": "crime drama"}  # fmt: skip
        opensearch.index(index=INDEX, id="m5", refresh=True, body=written)
        deadline = time.monotonic() + 60
        while _genre_edges(neo4j_driver).get("m5") != {"crime drama"}:
            assert follow.poll() is None, follow.communicate()[0]
            assert time.monotonic() < deadline, "the followed sync never wrote m5's genre"
            time.sleep(0.5)
    finally:
        follow.terminate()
        follow.wait(timeout=30)


def test_detaching_removes_kgqrs_records_and_leaves_the_index(
    opensearch: Any, neo4j_driver: Any, attached: tuple[str, Any]
) -> None:
    before = _index_state(opensearch)
    detached = kgqr("kb", "detach", KB, "--yes")
    assert detached.exit_code == 0 and f"{INDEX} untouched" in detached.output
    assert kb_meta.load(opensearch, KB) is None
    records, _, _ = neo4j_driver.execute_query(
        "MATCH (n:Node {kb: $kb}) RETURN count(n) AS n", kb=KB
    )
    assert records[0]["n"] == 0
    assert _index_state(opensearch) == before
