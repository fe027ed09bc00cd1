"""The write path against real OpenSearch, Neo4j, Redis and a real Celery worker."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest.job_store import JobStore
from ingest.kb_removal import drop_knowledge_base
from ingest.verify import verify
from kgqr_core.settings import Settings
from plugin import kb_meta, schema
from tests.fixtures.stark_layout import EDGES, NODES, write_stark_layout
from tests.integration.ingest_helpers import document_ids, run_to_end
from tests.shared_data import SHARED_DATA, needs_shared_data

Stores = tuple[Settings, Any, Any, Any]  # settings, OpenSearch, Neo4j and Redis clients
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

pytestmark = pytest.mark.usefixtures("ingest_worker")


@pytest.fixture
def stores(settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any) -> Stores:
    return settings, opensearch, neo4j_driver, redis_client


@pytest.fixture
def kb(kb_name: str, opensearch: Any, neo4j_driver: Any, redis_client: Any) -> Iterator[str]:
    yield kb_name
    drop_knowledge_base(opensearch, neo4j_driver, redis_client, kb_name)


@pytest.mark.same_on_containers
def test_stark_layout_lands_in_both_stores_with_matching_counts(
    stores: Stores, kb: str, tmp_path: Path
) -> None:
    _, opensearch, neo4j, _ = stores
    folder = write_stark_layout(tmp_path / "prime")
    _, progress = run_to_end(*stores, f"stark:{folder}", kb, chunk_size=4)
    assert progress.counts["documents"] == len(NODES)
    assert progress.counts["relations"] == len(EDGES)
    report = verify(opensearch, neo4j, kb)
    assert report.ok, report
    assert report.opensearch_counts == {"disease": 2, "gene/protein": 2, "drug": 2}
    assert report.relation_counts == {"ASSOCIATED_WITH": 3, "TARGET": 2, "INDICATION": 3}
    rows, _, _ = neo4j.execute_query(
        "MATCH (d:Drug {kb: $kb, name: 'adalimumab'})-[:INDICATION]->(x) RETURN x.name AS name "
        "ORDER BY name", kb=kb,
    )  # fmt: skip
    assert [r["name"] for r in rows] == ["psoriasis", "rheumatoid arthritis"]
    meta = kb_meta.load(opensearch, kb)
    assert meta is not None and "drug" in meta.structure.types
    assert "indication" in meta.structure.relations


def test_drop_removes_a_knowledge_base_from_every_store(stores: Stores, kb: str) -> None:
    from click.testing import CliRunner

    from kgqr_core.settings import get_settings
    from kgqr_ops.cli import main
    from query_rewriter.graph.shared_copies import SharedCopies

    _, opensearch, neo4j, redis = stores
    run_to_end(*stores, f"jsonl:{FIXTURES / 'tiny_kb'}", kb)
    settings = get_settings()  # the command's: where this machine keeps graph copies
    copies = SharedCopies.of_machine(settings)
    assert copies is not None, "the suite keeps graph copies (KGQR_GRAPH_SNAPSHOT_DIR)"
    copies.folder(kb, "ab12", 3).mkdir(parents=True)
    refused = CliRunner().invoke(main, ["ingest", "drop", "--kb", kb], input="n\n")
    assert refused.exit_code == 1 and opensearch.indices.exists(index=schema.documents_index(kb))
    assert copies.folder(kb, "ab12", 3).exists()
    for command in ("verify", "rejected"):
        there = CliRunner().invoke(main, ["ingest", command, "--kb", kb])
        assert there.exit_code == 0, (command, there.output)
    result = CliRunner().invoke(main, ["ingest", "drop", "--kb", kb, "--yes"])
    assert result.exit_code == 0, result.output
    assert f"{schema.documents_index(kb)}" in result.output and "1 job records" in result.output
    assert not opensearch.indices.exists(index=schema.documents_index(kb))
    assert kb_meta.load(opensearch, kb) is None
    rows, _, _ = neo4j.execute_query("MATCH (n:Node {kb: $kb}) RETURN count(n) AS n", kb=kb)
    assert rows[0]["n"] == 0
    assert not JobStore(redis).jobs_of(kb)
    assert not (copies.directory / kb).exists() and copies.directory.exists()
    # A dropped (or mistyped) KB is an error to check, not an empty "all is well" report.
    for command in ("verify", "rejected"):
        gone = CliRunner().invoke(main, ["ingest", command, "--kb", kb])
        assert gone.exit_code == 1, (command, gone.output)
        assert f"no knowledge base {kb!r}" in gone.output, command
    # Dropped again (or mistyped): safe to repeat, and said to have found nothing, not
    # "dropped" as if the KB meant were gone.
    again = CliRunner().invoke(main, ["ingest", "drop", "--kb", kb, "--yes"])
    assert again.exit_code == 0, again.output
    assert f"nothing to drop: no knowledge base {kb!r}" in again.output, again.output


def test_a_chunk_still_queued_when_its_kb_is_dropped_writes_nothing(
    stores: Stores, kb: str
) -> None:
    """A worker took the queued chunks of a dropped KB after the drop, and made its
    documents index again: `kgqr ingest drop` seemed to work, then the KB was back."""
    from ingest.tasks import ingest_chunk_task

    settings, opensearch, neo4j, redis = stores
    job, _ = run_to_end(*stores, f"jsonl:{FIXTURES / 'tiny_kb'}", kb)
    drop_knowledge_base(opensearch, neo4j, redis, kb)
    record = {"kind": "document", "id": "late", "type": "movie", "text": "queued before the drop"}
    model = settings.embedder.model
    answer = ingest_chunk_task.apply(args=[job.job_id, kb, 99, [record], False, model]).get()
    assert answer["skipped"] is True and answer["counts"] == {}
    assert not opensearch.indices.exists(index=schema.documents_index(kb))
    assert JobStore(redis).progress(job.job_id) is None


@pytest.mark.same_on_containers
def test_a_chunk_being_written_when_its_kb_is_dropped_does_not_bring_it_back(
    stores: Stores, kb: str
) -> None:
    """A chunk a worker was already writing when its KB was dropped wrote its documents
    after the drop, and the KB's index was back. The drop now waits for its lease."""
    from ingest.tasks import ingest_chunk_task
    from ingest.write_leases import WriteLeases

    settings, opensearch, neo4j, redis = stores
    job, _ = run_to_end(*stores, f"jsonl:{FIXTURES / 'tiny_kb'}", kb)
    # Enough to embed that the worker is still at it when the drop comes.
    records = [
        {"kind": "document", "id": f"late-{n}", "type": "movie", "text": f"late film {n} " * 10}
        for n in range(500)
    ]
    sent = ingest_chunk_task.apply_async(
        args=[job.job_id, kb, 99, records, False, settings.embedder.model]
    )
    try:
        deadline = time.monotonic() + 60
        while sent.id not in WriteLeases(redis).live(kb):
            assert not sent.ready(), f"the chunk ended before it was seen writing: {sent.result}"
            assert time.monotonic() < deadline, "the worker never took the chunk"
            time.sleep(0.02)
        said: list[str] = []
        removed = drop_knowledge_base(opensearch, neo4j, redis, kb, say=said.append)
        assert removed.still_writing == [] and said, said
        assert sent.ready(), "the drop ended before the chunk it waited for"
    finally:
        sent.get(timeout=300, propagate=False)
    assert not opensearch.indices.exists(index=schema.documents_index(kb))
    rows, _, _ = neo4j.execute_query("MATCH (n:Node {kb: $kb}) RETURN count(n) AS n", kb=kb)
    assert rows[0]["n"] == 0


def test_an_ingest_whose_kb_is_dropped_while_it_sends_stops_and_records_nothing(
    stores: Stores, kb: str
) -> None:
    """A drop while `kgqr ingest` still sent chunks left the KB's kgqr-meta record, saved
    after the last chunk: a KB with no indices, listed by `kgqr kb list`."""
    from ingest import job_runner
    from ingest.sources import open_source

    settings, opensearch, neo4j, redis = stores
    spec = f"jsonl:{FIXTURES / 'tiny_kb'}"
    sent: list[int] = []

    def send(job_id: str, chunk: int, records: list[Any], extract: bool) -> None:
        sent.append(chunk)
        if chunk == 0:
            drop_knowledge_base(opensearch, neo4j, redis, kb)

    dimension = job_runner.prepare_stores(settings, opensearch, neo4j)
    # One chunk a record: the next chunk finds the job gone. One chunk in all: no chunk
    # is left to ask before, and finishing the job finds it gone.
    for chunk_size in (1, 1000):
        sent.clear()
        with pytest.raises(ValueError, match="was forgotten while its chunks were sent"):
            job_runner.enqueue(
                open_source(spec), spec, kb, settings=settings, opensearch=opensearch,
                jobs=JobStore(redis), send=send, dimension=dimension, chunk_size=chunk_size,
            )  # fmt: skip
        assert sent == [0]
        assert kb_meta.load(opensearch, kb) is None
        assert not opensearch.indices.exists(index=schema.documents_index(kb))


def test_dropping_a_knowledge_base_leaves_one_whose_name_it_begins(stores: Stores, kb: str) -> None:
    """Job ids begin with their KB's name, and drop forgot every job whose id began with
    `KB-`: dropping `movies` forgot the jobs of `movies-x`, whose next ingest then ran
    from scratch and whose status was gone."""
    _, opensearch, neo4j, redis = stores
    longer = f"{kb}-x"
    try:
        run_to_end(*stores, f"jsonl:{FIXTURES / 'tiny_kb'}", kb)
        kept, _ = run_to_end(*stores, f"jsonl:{FIXTURES / 'tiny_kb'}", longer)
        removed = drop_knowledge_base(opensearch, neo4j, redis, kb)
        assert removed.jobs == 1
        progress = JobStore(redis).progress(kept.job_id)
        assert progress is not None and progress.kb == longer and progress.finished
        assert verify(opensearch, neo4j, longer).ok
    finally:
        drop_knowledge_base(opensearch, neo4j, redis, longer)


def test_documents_carry_text_vector_and_fields(stores: Stores, kb: str) -> None:
    opensearch = stores[1]
    run_to_end(*stores, f"jsonl:{FIXTURES / 'tiny_kb'}", kb)
    doc = opensearch.get(index=schema.documents_index(kb), id="m1")["_source"]
    assert doc["title"] == "Heat" and doc["fields"]["year"] == 1995
    assert "bank robbers" in doc["text"] and len(doc["vector"]) == 384
    hits = opensearch.search(
        index=schema.documents_index(kb),
        body={"query": {"match": {"text": "whistle tobacco"}}},
    )["hits"]["hits"]
    assert hits[0]["_id"] == "m3"


def test_broken_records_are_set_aside_and_the_rest_lands(stores: Stores, kb: str) -> None:
    _, opensearch, neo4j, _ = stores
    _, progress = run_to_end(*stores, f"jsonl:{FIXTURES / 'broken_kb'}", kb)
    assert document_ids(opensearch, kb) == ["ok1", "ok2", "ok3", "ok4"]
    assert progress.counts["documents"] == 4
    assert progress.counts["relations"] == 2
    assert progress.counts["rejected"] == 6
    dead = schema.deadletter_index(kb)
    opensearch.indices.refresh(index=dead)
    letters = opensearch.search(index=dead, body={"size": 50})["hits"]["hits"]
    assert len(letters) == 6
    assert all(letter["_source"]["reason"] for letter in letters)
    assert verify(opensearch, neo4j, kb).ok


def test_records_a_store_cannot_hold_are_set_aside_not_their_chunk(
    stores: Stores, kb: str, tmp_path: Path
) -> None:
    """A 9,000-character title (Neo4j cannot index a name that long: the graph write of
    the whole chunk failed) and a 600-byte id (over OpenSearch's 512) cost only their own
    records, and the relation pointing at the second."""
    _, opensearch, neo4j, _ = stores
    documents = [
        {"id": "ok1", "type": "note", "title": "Good", "text": "Graphs store relations."},
        {"id": "long-title", "type": "note", "title": "T" * 9000, "text": "A long title."},
        {"id": "é" * 300, "type": "note", "title": "Long id", "text": "600 bytes of id."},
        {"id": "ok2", "type": "note", "title": "Also good", "text": "Engines rank documents."},
    ]
    relations = [
        {"source": "ok1", "type": "see_also", "target": "ok2"},
        {"source": "ok1", "type": "see_also", "target": "é" * 300},
    ]
    for name, rows in (("documents", documents), ("relations", relations)):
        lines = "".join(json.dumps(row) + "\n" for row in rows)
        (tmp_path / f"{name}.jsonl").write_text(lines)
    _, progress = run_to_end(*stores, f"jsonl:{tmp_path}", kb)
    assert document_ids(opensearch, kb) == ["ok1", "ok2"]
    assert (progress.counts["relations"], progress.counts["rejected"]) == (1, 3)
    dead = schema.deadletter_index(kb)
    opensearch.indices.refresh(index=dead)
    reasons = sorted(h["_source"]["reason"] for h in opensearch.search(index=dead)["hits"]["hits"])
    assert "may have at most 1024" in reasons[0] and "OpenSearch ids hold at most 512" in reasons[1]
    assert verify(opensearch, neo4j, kb).ok


def test_values_no_store_keeps_cost_their_own_records_not_their_chunk(
    stores: Stores, kb: str, tmp_path: Path
) -> None:
    """A cut emoji escape (a lone surrogate: the tokenizer raised, so the chunk failed on
    every re-run), a NaN field (written as null, unsaid), a 2**70 relation property and
    a property with no name (Neo4j's driver and Neo4j raised after the documents had
    landed, and none of the chunk's relations were written)."""
    _, opensearch, neo4j, _ = stores
    documents = (
        '{"id": "ok1", "type": "note", "title": "Good", "text": "Graphs store relations."}\n'
        '{"id": "cut", "type": "note", "title": "Heat \\ud83d", "text": "An emoji cut."}\n'
        '{"id": "nan", "type": "note", "title": "Odd", "fields": {"score": NaN}}\n'
        '{"id": "ok2", "type": "note", "title": "Also good", "text": "Engines rank."}\n'
    )
    relations = [
        {"source": "ok1", "type": "see_also", "target": "ok2"},
        {"source": "ok2", "type": "cites", "target": "ok1", "properties": {"n": 2**70}},
        {"source": "ok2", "type": "cites", "target": "ok1", "properties": {"": "x"}},
    ]
    (tmp_path / "documents.jsonl").write_text(documents)
    (tmp_path / "relations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in relations))
    _, progress = run_to_end(*stores, f"jsonl:{tmp_path}", kb)
    assert document_ids(opensearch, kb) == ["ok1", "ok2"]
    assert (progress.counts["relations"], progress.counts["rejected"]) == (1, 4)
    dead = schema.deadletter_index(kb)
    opensearch.indices.refresh(index=dead)
    reasons = " | ".join(
        h["_source"]["reason"] for h in opensearch.search(index=dead)["hits"]["hits"]
    )
    assert "lone surrogate" in reasons and "nan" in reasons and "64 bits" in reasons, reasons
    assert "document nan: fields.score" in reasons, reasons  # which record, not only which field
    assert "Neo4j property" in reasons, reasons
    assert verify(opensearch, neo4j, kb).ok


def test_an_empty_source_fails_and_makes_no_knowledge_base(
    kb: str, tmp_path: Path, opensearch: Any
) -> None:
    """It ran a job of 0 chunks that ended "[done]", and left a knowledge base with no
    documents in `kgqr kb list`."""
    from click.testing import CliRunner

    from kgqr_ops.cli import main

    (tmp_path / "documents.jsonl").write_text("\n")
    result = CliRunner().invoke(main, ["ingest", f"jsonl:{tmp_path}", "--kb", kb, "--no-wait"])
    assert result.exit_code == 1, result.output
    assert f"jsonl:{tmp_path} holds no records: nothing was ingested" in result.output
    assert kb_meta.load(opensearch, kb) is None
    assert not opensearch.indices.exists(index=schema.documents_index(kb))


def test_a_run_that_set_records_aside_says_where_to_read_why(kb: str, tmp_path: Path) -> None:
    """It ended "[done]" with "rejected 1" among the counts, and nothing said how to see
    which record and why."""
    from click.testing import CliRunner

    from kgqr_ops.cli import main

    (tmp_path / "documents.jsonl").write_text(
        '{"id": "ok", "type": "note", "title": "Good", "text": "Graphs store relations."}\n'
        '{"id": "nan", "type": "note", "title": "Odd", "fields": {"score": NaN}}\n'
    )
    result = CliRunner().invoke(main, ["ingest", f"jsonl:{tmp_path}", "--kb", kb])
    assert result.exit_code == 0, result.output
    assert f"1 records set aside, each with why: kgqr ingest rejected --kb {kb}" in result.output
    # Listed by job, with the record as the source held it; once fixed, cleared.
    job = result.output.split("job ", 1)[1].split(":", 1)[0]
    for listed_by in ([], ["--job", job]):
        shown = CliRunner().invoke(main, ["ingest", "rejected", "--kb", kb, *listed_by])
        assert "1 rejected records" in shown.output and "document nan: fields.score" in (
            shown.output
        ), shown.output
    other = CliRunner().invoke(main, ["ingest", "rejected", "--kb", kb, "--job", "another"])
    assert "0 rejected records" in other.output
    cleared = CliRunner().invoke(main, ["ingest", "rejected", "--kb", kb, "--clear"])
    assert "1 rejected records removed" in cleared.output
    after = CliRunner().invoke(main, ["ingest", "rejected", "--kb", kb]).output
    assert "0 rejected records" in after


def test_a_run_that_set_every_record_aside_fails(kb: str, tmp_path: Path) -> None:
    """A file in another format or encoding: every line was set aside, and the run exited
    0, a script going on as if the KB had been filled."""
    from click.testing import CliRunner

    from kgqr_ops.cli import main

    (tmp_path / "documents.jsonl").write_bytes(b"id;title\n1;caf\xe9\n")
    result = CliRunner().invoke(main, ["ingest", f"jsonl:{tmp_path}", "--kb", kb])
    assert result.exit_code == 1, result.output
    assert "nothing was written: every record read was set aside" in result.output
    assert f"2 records set aside, each with why: kgqr ingest rejected --kb {kb}" in result.output
    shown = CliRunner().invoke(main, ["ingest", "status", "--kb", kb])
    assert shown.exit_code == 1 and "nothing was written" in shown.output, shown.output


def test_a_structure_file_that_does_not_parse_stops_the_job_before_any_chunk(
    stores: Stores, kb: str, tmp_path: Path
) -> None:
    """Read after the last chunk, it left every document written, the KB unlisted, and a
    pydantic message naming no file. Read first, no index is made either."""
    from click.testing import CliRunner

    from kgqr_ops.cli import main

    _, opensearch, _, redis = stores
    (tmp_path / "documents.jsonl").write_text('{"id": "a", "type": "note", "title": "A"}\n')
    (tmp_path / "structure.json").write_text('{"types": "not an object"}')
    result = CliRunner().invoke(main, ["ingest", f"jsonl:{tmp_path}", "--kb", kb])
    assert result.exit_code == 1, result.output
    assert f"{tmp_path}/structure.json: types: Input should be" in result.output
    assert not opensearch.indices.exists(index=schema.documents_index(kb))
    assert JobStore(redis).jobs_of(kb) == []


def test_second_run_sends_nothing_and_changes_nothing(stores: Stores, kb: str) -> None:
    _, opensearch, neo4j, _ = stores
    spec = f"jsonl:{FIXTURES / 'tiny_kb'}"
    first, progress = run_to_end(*stores, spec, kb, chunk_size=5)
    second, again = run_to_end(*stores, spec, kb, chunk_size=5)
    assert second.job_id == first.job_id
    assert second.chunks_sent == 0 and second.chunks_already_done == first.chunks_total
    assert again.counts == progress.counts
    # A forced restart re-writes everything: still no duplicates anywhere.
    run_to_end(*stores, spec, kb, chunk_size=5, restart=True)
    assert len(document_ids(opensearch, kb)) == 8
    rels, _, _ = neo4j.execute_query("MATCH (:Node {kb: $kb})-[r]->() RETURN count(r) AS n", kb=kb)
    assert rels[0]["n"] == 9
    assert verify(opensearch, neo4j, kb).ok


@pytest.mark.same_on_containers
@needs_shared_data("musique100")
def test_musique_subset_with_corpus_kg(stores: Stores, kb: str) -> None:
    _, opensearch, neo4j, _ = stores
    _, progress = run_to_end(*stores, f"musique:{SHARED_DATA / 'musique100'}", kb, limit=30)
    assert progress.counts["documents"] == 30
    assert progress.counts["triples"] > 30
    report = verify(opensearch, neo4j, kb)
    assert report.ok, report
    assert report.opensearch_counts == {"passage": 30}
    assert report.triples_indexed == report.relation_counts["RELATION"]
    assert report.entities > 30
    rows, _, _ = neo4j.execute_query(
        "MATCH (p:Node {kb: $kb, id: 'p0'})-[:MENTIONS]->(e:Entity)-[r:RELATION]->(t) "
        "WHERE r.passage_id = 'p0' AND r.relation = 'published by' "
        "RETURN e.name AS head, t.name AS tail, r.ttr AS ttr",
        kb=kb,
    )
    assert {(r["head"], r["tail"]) for r in rows} == {
        ("Journal of Mathematical Physics", "American Institute of Physics")
    }
    assert (
        rows[0]["ttr"]
        == "Journal of Mathematical Physics published by American Institute of Physics."
    )


def _notes(folder: Path, count: int) -> str:
    """A jsonl source of `count` short notes, as its source spec."""
    import json

    folder.mkdir()
    with (folder / "documents.jsonl").open("w") as out:
        for i in range(count):
            doc = {"id": f"d{i}", "type": "note", "title": f"Note {i}", "text": f"note number {i}"}
            out.write(json.dumps(doc) + "\n")
    return f"jsonl:{folder}"


def _kill_after_chunks(worker: Any, jobs: Any, job_id: str, chunks: int) -> None:
    """SIGKILL the temporary worker's current process once `chunks` chunks are done."""
    import signal
    import time

    deadline = time.monotonic() + 120
    while jobs.progress(job_id).chunks_done < chunks:
        assert time.monotonic() < deadline, "the worker never got going"
        time.sleep(0.05)
    worker.process.send_signal(signal.SIGKILL)
    worker.process.wait()


def _kill_while_holding(worker: Any, log: Path, held: int) -> None:
    """SIGKILL the temporary worker once it holds `held` chunks it has not finished: its
    prefetch is full (concurrency 2, prefetch multiplier 1), so it is running them, not
    taking another. Killed right after a chunk instead, it may die between kombu's taking
    the next message off the queue and its recording it as unacknowledged: that chunk is
    then in neither place, and only `kgqr ingest`'s stall re-send brings it back."""
    import re
    import signal
    import time

    deadline = time.monotonic() + 120
    while True:
        text = log.read_text() if log.exists() else ""
        received = set(re.findall(r"chunk\[([0-9a-f-]+)\] received", text))
        finished = set(re.findall(r"chunk\[([0-9a-f-]+)\] succeeded", text))
        if len(received - finished) >= held:
            break
        assert time.monotonic() < deadline, "the worker never got going"
        time.sleep(0.02)
    worker.process.send_signal(signal.SIGKILL)
    worker.process.wait()


@pytest.mark.worker_faults
def test_killed_worker_loses_nothing_and_a_rerun_completes_without_duplicates(
    stores: Stores, kb: str, tmp_path: Path
) -> None:
    from ingest.job_runner import follow, temporary_worker
    from ingest.job_store import JobStore
    from tests.integration.ingest_helpers import enqueue_source

    settings, opensearch, neo4j, redis = stores
    spec, queue = (
        _notes(tmp_path / "corpus", 120),
        f"{kb}-queue",
    )  # a queue the session worker ignores
    jobs = JobStore(redis)

    first = enqueue_source(*stores, spec, kb, chunk_size=4, queue=queue)
    assert first.chunks_total == 30
    with temporary_worker(settings, queues=queue, restart=False) as worker:
        _kill_after_chunks(worker, jobs, first.job_id, 3)
    interrupted = jobs.progress(first.job_id)
    assert interrupted is not None and not interrupted.finished

    again = enqueue_source(*stores, spec, kb, chunk_size=4, queue=queue)
    assert again.job_id == first.job_id
    assert again.chunks_already_done == interrupted.chunks_done >= 3
    with temporary_worker(settings, queues=queue):
        final = follow(jobs, again.job_id, lambda _p: None, timeout_s=240)
    assert final.finished
    assert final.counts["documents"] == 120
    assert document_ids(opensearch, kb) == sorted(f"d{i}" for i in range(120))
    nodes, _, _ = neo4j.execute_query("MATCH (n:Node {kb: $kb}) RETURN count(n) AS n", kb=kb)
    assert nodes[0]["n"] == 120


@pytest.mark.worker_faults
def test_a_worker_that_dies_mid_job_is_restarted_and_the_job_finishes(
    stores: Stores, kb: str, tmp_path: Path
) -> None:
    """What a Redis restart can do to a Celery 5.7 worker (ingest.worker_supervisor), done
    with SIGKILL: the supervisor puts the chunks the dead one held back on the queue
    (ingest.held_chunks) and starts a new worker, which takes them with the rest. No stall
    re-send here: without the put-back the held chunks would wait out the broker's hour;
    with no restart nothing would take the queue at all."""
    from ingest import job_runner
    from ingest.job_store import JobStore
    from tests.integration.ingest_helpers import enqueue_source

    settings, opensearch, neo4j, redis = stores
    spec, queue = _notes(tmp_path / "corpus", 120), f"{kb}-queue"
    jobs = JobStore(redis)
    job = enqueue_source(*stores, spec, kb, chunk_size=4, queue=queue)
    log = tmp_path / "worker.log"
    with job_runner.temporary_worker(settings, str(log), queues=queue) as worker:
        _kill_while_holding(worker, log, 2)
        final = job_runner.follow(jobs, job.job_id, lambda _p: None, timeout_s=240)
        assert worker.restarts == 1 and worker.process.poll() is None
    assert "chunks the ended ingest worker held back on their queues" in log.read_text()
    assert final.finished and not final.failed, final
    assert final.counts["documents"] == 120
    assert document_ids(opensearch, kb) == sorted(f"d{i}" for i in range(120))
    nodes, _, _ = neo4j.execute_query("MATCH (n:Node {kb: $kb}) RETURN count(n) AS n", kb=kb)
    assert nodes[0]["n"] == 120
    said = log.read_text(errors="replace")
    assert "ended with signal SIGKILL" in said and "the ended ingest worker held back" in said


def test_raw_passages_get_llm_triples_and_ttrs_and_a_rerun_is_served_from_cache(
    stores: Stores, kb: str, llm_settings: Settings
) -> None:
    from ingest.records import Document
    from ingest.sources import open_source
    from ingest.triple_extraction import extract
    from kgqr_core.llm import LlmClient

    _, opensearch, neo4j, redis = stores
    _, progress = run_to_end(*stores, f"passages:{FIXTURES / 'passages.jsonl'}", kb, timeout_s=400)
    assert progress.counts["documents"] == 2
    assert progress.counts["triples"] >= 2, progress
    index = schema.triples_index(kb)
    opensearch.indices.refresh(index=index)
    triples = [
        h["_source"] for h in opensearch.search(index=index, body={"size": 100})["hits"]["hits"]
    ]
    assert {t["passage_id"] for t in triples} <= {"heat", "mann"}
    assert any("Mann" in (t["head"] + t["tail"]) for t in triples)
    assert all(t["ttr"] for t in triples)
    report = verify(opensearch, neo4j, kb)
    assert report.ok and report.triples_indexed == report.relation_counts["RELATION"]
    # Every LLM answer was cached by (model, prompt): extracting again costs no LLM call.
    passage = next(iter(open_source(f"passages:{FIXTURES / 'passages.jsonl'}").records()))
    assert isinstance(passage, Document)
    again = extract(LlmClient(llm_settings, redis), passage)
    assert again.llm_calls >= 1 and again.cached_calls == again.llm_calls


def test_an_index_made_by_an_older_template_gains_the_new_fields(
    opensearch: Any, kb_name: str
) -> None:
    """Documents indices are strict; one made before `metadata` existed would refuse every
    write of a re-ingest, unless ingest adds the field first."""
    from plugin import installer, schema

    index = schema.documents_index(kb_name)
    old = {"dynamic": "strict", "properties": {"id": {"type": "keyword"}}}
    # The highest-priority template alone applies: this one stands in for an older kgqr's.
    older = {"index_patterns": [index], "priority": 500, "template": {"mappings": old}}
    opensearch.indices.put_index_template(name=index, body=older)
    opensearch.indices.create(index=index)
    try:
        before = opensearch.indices.get_mapping(index=index)[index]["mappings"]["properties"]
        assert "metadata" not in before
        installer.add_new_fields(opensearch, kb_name, "documents")
        opensearch.index(index=index, id="d1", body={"id": "d1", "metadata": {"type": "t"}})
        properties = opensearch.indices.get_mapping(index=index)[index]["mappings"]["properties"]
        assert {"metadata", "title", "text", "fields"} <= set(properties)
    finally:
        opensearch.indices.delete(index=index)
        opensearch.indices.delete_index_template(name=index)


def test_an_id_given_twice_in_a_source_is_one_document_typed_alike_in_both_stores(
    stores: Stores, kb: str, tmp_path: Path
) -> None:
    """Both records were counted, and Neo4j typed the node by whichever type's statement ran
    last: here `paper`, where the documents index kept the last record's `book`."""
    lines = [{"id": "b", "type": t, "title": "B"} for t in ("book", "paper", "book")]
    (tmp_path / "documents.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    _, opensearch, neo4j, _ = stores
    _, progress = run_to_end(*stores, f"jsonl:{tmp_path}", kb)
    assert progress.counts["documents"] == 1
    opensearch.indices.refresh(index=schema.documents_index(kb))
    kept = opensearch.get(index=schema.documents_index(kb), id="b")["_source"]["type"]
    records, _, _ = neo4j.execute_query("MATCH (n:Node {kb: $kb, id: 'b'}) RETURN n.type AS t",
                                        kb=kb)  # fmt: skip
    assert kept == "book" and [r["t"] for r in records] == ["book"]
    assert verify(opensearch, neo4j, kb).ok


def test_a_source_streams_through_the_queue_a_few_chunks_at_a_time(
    kb: str, opensearch: Any, redis_client: Any, kgqr_env: Callable[..., None]
) -> None:
    """`kgqr ingest` sent every chunk before any was written: the broker held the whole
    source. With room for two, the queue never holds more, and every document lands."""
    import threading

    from click.testing import CliRunner

    from kgqr_core.settings import get_settings
    from kgqr_ops.cli import main
    from tests.integration.ingest_helpers import TINY_KB

    kgqr_env(KGQR_INGEST_QUEUED_CHUNKS="2")
    queue, lengths, done = get_settings().redis.ingest_queue, [], threading.Event()

    def sample() -> None:
        while not done.is_set():
            lengths.append(redis_client.llen(queue))
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = CliRunner().invoke(main, ["ingest", TINY_KB, "--kb", kb, "--chunk-size", "1"])
    finally:
        done.set()
        sampler.join()
    assert result.exit_code == 0, result.output
    assert "job " in result.output and ": 9 chunks (9 sent, 0 already done)" in result.output
    assert len(document_ids(opensearch, kb)) == 8
    assert lengths and max(lengths) <= 2, max(lengths)


def test_a_timeout_while_chunks_wait_for_room_says_the_same_command_sends_the_rest(
    kb: str, redis_client: Any, monkeypatch: pytest.MonkeyPatch, kgqr_env: Callable[..., None]
) -> None:
    """--timeout bounded only the following: sending, which now waits for workers, ran on."""
    from click.testing import CliRunner

    from ingest.celery_app import app
    from kgqr_ops.cli import main
    from tests.integration.ingest_helpers import TINY_KB

    # No worker takes the queue.
    kgqr_env(KGQR_INGEST_QUEUED_CHUNKS="1", KGQR_INGEST_QUEUE=f"{kb}-no-worker")
    # Where chunks go, as a process started with that queue would send them.
    monkeypatch.setitem(app.conf, "task_default_queue", f"{kb}-no-worker")
    try:
        args = ["ingest", TINY_KB, "--kb", kb, "--chunk-size", "1", "--worker", "never",
                "--timeout", "2"]  # fmt: skip
        result = CliRunner().invoke(main, args)
    finally:
        # The chunk it sent, which no worker takes, and the queue's binding kombu made.
        redis_client.delete(f"{kb}-no-worker", f"_kombu.binding.{kb}-no-worker")
    assert result.exit_code == 1, result.output
    assert "stopped while sending (--timeout): job " in result.output
    assert "has chunks not sent yet; the same command sends them" in result.output
