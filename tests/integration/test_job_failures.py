"""A chunk that fails for good ends its job as failed (against the real Redis), so the CLI
that follows it stops and exits non-zero instead of waiting forever."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ingest import job_runner
from ingest.cli import ingest
from ingest.job_store import JOB_TTL_S, JobStore


@pytest.fixture
def jobs(redis_client: Any, unique_name: str) -> Any:
    store = JobStore(redis_client)
    yield store, unique_name
    store.forget(unique_name)


def test_a_failed_chunk_finishes_the_job_as_failed_and_a_rerun_clears_it(jobs: Any) -> None:
    store, job = jobs
    store.start(job, "kb", "jsonl:x")
    store.finish_enqueuing(job, chunks_total=2)
    store.complete_chunk(job, 0, {"documents": 3})
    running = store.progress(job)
    assert running is not None and not running.finished and running.state == "enqueued"

    store.fail_chunk(job, 1, "Neo4jError: constraint violated")
    failed = job_runner.follow(store, job, lambda _p: None, timeout_s=5)
    assert failed.finished and failed.state == "failed"
    assert failed.failed == {1: "Neo4jError: constraint violated"}

    store.start(job, "kb", "jsonl:x")  # a re-run sends the failed chunk again
    store.finish_enqueuing(job, chunks_total=2)
    assert store.progress(job).failed == {}
    store.complete_chunk(job, 1, {"documents": 2})
    done = store.progress(job)
    assert done.state == "done" and done.counts["documents"] == 5


def test_a_running_jobs_records_do_not_expire_and_a_finished_ones_do(
    redis_client: Any, jobs: Any
) -> None:
    """Under the local Redis's bound (`volatile-lru`: keys that expire may be evicted) a
    queued job's record could go before a cache entry, and its chunks were then set aside
    unwritten: a running job's records expire no more, a finished job's still do."""
    store, job = jobs
    key = store.key(job)
    store.start(job, "kb", "jsonl:x")
    store.finish_enqueuing(job, chunks_total=2)
    store.complete_chunk(job, 0, {"documents": 1})
    store.note_retry(job, 1, "OpenSearch answered 429")
    assert store.progress(job) is not None
    for part in ("", ":done", ":retrying"):
        assert redis_client.ttl(key + part) == -1, part  # no expiry
    store.complete_chunk(job, 1, {"documents": 1})
    assert store.progress(job).finished
    assert 0 < redis_client.ttl(key) <= JOB_TTL_S and redis_client.ttl(key + ":done") > 0
    store.start(job, "kb", "jsonl:x")  # run again: live again
    assert redis_client.ttl(key) == -1 and redis_client.ttl(key + ":done") == -1


def test_copies_to_redo_are_kept_while_a_job_runs_and_expire_with_it(
    redis_client: Any, jobs: Any
) -> None:
    """Each attempt's graph reads of a chunk join the next's, without expiry while the job
    runs (evicted, a retry left copies stale); a late delivery of a chunk that failed for
    good, after the job was seen finished, left a field that never expired."""
    store, job = jobs
    key = store.key(job) + ":copies"
    store.start(job, "kb", "jsonl:x")
    store.finish_enqueuing(job, chunks_total=2)
    assert store.copies_to_redo(job, 0, {"p1"}, set()) == ({"p1"}, set())
    assert store.copies_to_redo(job, 0, set(), {"m1"}) == ({"p1"}, {"m1"})  # the retry
    assert redis_client.ttl(key) == -1
    store.complete_chunk(job, 0, {"documents": 1})
    assert not redis_client.hexists(key, 0)
    assert store.copies_to_redo(job, 0, {"p2"}, set()) == ({"p2"}, set())  # done: not kept
    assert not redis_client.hexists(key, 0)
    store.fail_chunk(job, 1, "a record no retry fixes")
    assert store.progress(job).finished
    store.copies_to_redo(job, 1, {"p3"}, set())  # a late delivery of the failed chunk
    assert 0 < redis_client.ttl(key) <= JOB_TTL_S


def test_a_done_chunk_cannot_be_marked_failed(jobs: Any) -> None:
    store, job = jobs
    store.start(job, "kb", "jsonl:x")
    store.finish_enqueuing(job, chunks_total=1)
    store.complete_chunk(job, 0, {"documents": 1})
    store.fail_chunk(job, 0, "a late duplicate delivery failed")
    assert store.progress(job).state == "done"


def test_progress_is_one_snapshot_while_chunks_complete(redis_client: Any, jobs: Any) -> None:
    """A reader never sees a chunk done without its counts. Progress read the counts and
    the done set in two calls; a chunk finishing between them made a finished job report
    0 documents (it failed CI once: the documents were there)."""
    store, job = jobs
    chunks = 300
    store.start(job, "kb", "jsonl:x")
    store.finish_enqueuing(job, chunks_total=chunks)

    def complete_all() -> None:
        writer = JobStore(redis_client)
        for chunk in range(chunks):
            writer.complete_chunk(job, chunk, {"documents": 2})

    completing = threading.Thread(target=complete_all)
    completing.start()
    torn = []
    while completing.is_alive():
        progress = store.progress(job)
        assert progress is not None
        if progress.counts["documents"] != 2 * progress.chunks_done:
            torn.append((progress.chunks_done, progress.counts["documents"]))
    completing.join()
    assert not torn, f"{len(torn)} torn reads, e.g. {torn[:3]} (chunks done, documents)"
    assert store.progress(job).counts["documents"] == 2 * chunks


def test_status_names_each_failed_chunk_and_why(jobs: Any, settings: Any) -> None:
    store, job = jobs
    store.start(job, "kb", "jsonl:x")
    store.finish_enqueuing(job, chunks_total=1)
    store.fail_chunk(job, 0, "ValueError: no letters or digits")
    result = CliRunner().invoke(ingest, ["status", job])
    assert result.exit_code == 1, result.output  # as `kgqr ingest` ends on a failed chunk
    assert "[failed]" in result.output
    assert "chunk 0 FAILED: ValueError: no letters or digits" in result.output


def test_a_kbs_jobs_are_listed_and_one_that_will_not_be_resumed_is_forgotten(
    jobs: Any, unique_name: str
) -> None:
    """A job whose source changed since (a re-run is another job) stayed unfinished for
    its 30 days and held `kgqr ingest reembed` back, and no command found its id."""
    store, job = jobs
    kb = f"kb-{unique_name}"[:60]
    store.start(job, kb, "jsonl:x")
    store.finish_enqueuing(job, chunks_total=2)
    listed = CliRunner().invoke(ingest, ["status", "--kb", kb])
    assert listed.exit_code == 0 and f"job {job} [" in listed.output, listed.output
    assert store.unfinished(kb) == [job]
    forgotten = CliRunner().invoke(ingest, ["forget", job])
    assert forgotten.exit_code == 0 and f"{job}: forgotten" in forgotten.output
    assert store.unfinished(kb) == [] and store.progress(job) is None
    again = CliRunner().invoke(ingest, ["forget", job])
    assert again.exit_code == 1 and "no ingest job" in again.output


def test_rejected_records_that_cannot_be_set_aside_fail_their_chunk(
    opensearch: Any, kb_name: str
) -> None:
    """Completing a chunk whose dead letters did not land would lose those records."""
    from ingest.opensearch_writer import DeadLetterWriteError, WriteFailure, write_dead_letters
    from plugin import schema

    index = schema.deadletter_index(kb_name)
    failure = WriteFailure({"kind": "rejected", "raw": '{"id": "x", broken'}, "bad JSON", "parse")
    opensearch.indices.create(index=index)
    try:
        opensearch.indices.put_settings(index=index, body={"index.blocks.write": True})
        with pytest.raises(DeadLetterWriteError, match="1 of 1 rejected records could not"):
            write_dead_letters(opensearch, kb_name, "job", 0, [failure])
        opensearch.indices.put_settings(index=index, body={"index.blocks.write": False})
        write_dead_letters(opensearch, kb_name, "job", 0, [failure])  # the re-run lands it
        opensearch.indices.refresh(index=index)
        stored = opensearch.search(index=index)["hits"]["hits"]
        assert [hit["_source"]["raw"] for hit in stored] == ['{"id": "x", broken']
    finally:
        opensearch.indices.delete(index=index)


def _retried_until_lifted(
    stores: tuple[Any, Any, Any, Any], kb: str, says: str, lift: Callable[[], Any]
) -> None:
    """TINY_KB's ingest into `kb` is retried, saying `says`, with nothing set aside; once
    `lift()` ends the trouble, the job completes with every document exactly once."""
    from plugin import schema
    from tests.integration.ingest_helpers import TINY_KB, enqueue_source

    settings, opensearch, neo4j_driver, redis_client = stores
    enqueued = enqueue_source(settings, opensearch, neo4j_driver, redis_client, TINY_KB, kb,
                              restart=True)  # fmt: skip
    jobs = JobStore(redis_client)
    deadline = time.monotonic() + 60
    while not (progress := jobs.progress(enqueued.job_id)) or not progress.retrying:
        assert time.monotonic() < deadline, f"no retry was noted: {progress}"
        time.sleep(0.2)
    assert says in next(iter(progress.retrying.values()))
    assert not progress.finished and progress.counts["rejected"] == 0
    lift()
    final = job_runner.follow(jobs, enqueued.job_id, lambda _p: None, timeout_s=120)
    assert final.state == "done" and final.retrying == {} and final.failed == {}
    assert final.counts["rejected"] == 0
    opensearch.indices.refresh(index=schema.documents_index(kb))
    documents = opensearch.count(index=schema.documents_index(kb))["count"]
    assert documents == final.counts["documents"] == 8


def test_a_blocked_index_is_retried_not_rejected_and_the_job_resumes_when_lifted(
    settings: Any, opensearch: Any, neo4j_driver: Any, redis_client: Any, ingest_worker: Any,
    kb_name: str,
) -> None:  # fmt: skip
    """A read-only block (a full disk's flood stage, an operator) is the index's state, not a
    bad record: the chunk is retried and says why, nothing is set aside, and once the block
    is lifted the job completes with every document exactly once."""
    from ingest import job_runner
    from ingest.kb_removal import drop_knowledge_base
    from plugin import schema

    index = schema.documents_index(kb_name)
    job_runner.prepare_stores(settings, opensearch, neo4j_driver)
    opensearch.indices.create(index=index)
    opensearch.indices.put_settings(index=index, body={"index.blocks.write": True})
    try:
        unblocked = {"index.blocks.write": False}
        _retried_until_lifted(
            (settings, opensearch, neo4j_driver, redis_client), kb_name, "is blocked",
            lambda: opensearch.indices.put_settings(index=index, body=unblocked),
        )  # fmt: skip
    finally:
        opensearch.indices.put_settings(index=index, body={"index.blocks.write": False})
        drop_knowledge_base(opensearch, neo4j_driver, redis_client, kb_name)


def _failing_pipeline(opensearch: Any, index: str, name: str, document: str) -> None:
    """`index` writes go through an ingest pipeline that fails `document` on the engine's
    side: a `fail` processor, which the engine answers as the item's 500."""
    opensearch.ingest.put_pipeline(id=name, body={"processors": [{"fail": {
        "if": f"ctx.id == '{document}'", "message": "the node could not write it"}}]})  # fmt: skip
    opensearch.indices.put_settings(index=index, body={"index.default_pipeline": name})


def test_a_record_the_engine_fails_to_write_is_retried_not_set_aside(
    settings: Any, opensearch: Any, neo4j_driver: Any, redis_client: Any, ingest_worker: Any,
    kb_name: str,
) -> None:  # fmt: skip
    """An item's 500 is the engine's trouble, not the record's: set aside, its chunk was
    done and a re-run of the same source never sent it again. The chunk is retried, and
    lands whole once the engine writes it; while the engine still fails the record, the
    chunk stays undone (its retries spent, it fails), so a re-run writes it."""
    from ingest.chunk_ingest import ingest_chunk
    from ingest.kb_removal import drop_knowledge_base
    from ingest.opensearch_writer import TransientBulkError
    from ingest.records import Document
    from ingest.worker_resources import WorkerResources
    from plugin import schema

    index, pipeline = schema.documents_index(kb_name), f"{kb_name}-failing"
    job_runner.prepare_stores(settings, opensearch, neo4j_driver)
    opensearch.indices.create(index=index)
    _failing_pipeline(opensearch, index, pipeline, "m2")
    try:
        _retried_until_lifted(
            (settings, opensearch, neo4j_driver, redis_client), kb_name,
            "the engine failed to write 1 records (m2)",
            lambda: opensearch.indices.put_settings(
                index=index, body={"index.default_pipeline": None}),
        )  # fmt: skip
        _failing_pipeline(opensearch, index, pipeline, "m9")
        resources, job_id = WorkerResources(settings), f"{kb_name}-last"
        jobs = JobStore(redis_client)
        jobs.start(job_id, kb_name, "test")
        try:
            record = Document(id="m9", type="movie", title="Miami Vice").model_dump(mode="json")
            with pytest.raises(TransientBulkError, match="the node could not write it"):
                ingest_chunk(resources, job_id, kb_name, 0, [record])
            assert not jobs.is_done(job_id, 0)
            opensearch.indices.put_settings(index=index, body={"index.default_pipeline": None})
            outcome = ingest_chunk(resources, job_id, kb_name, 0, [record])  # a re-run
        finally:
            resources.neo4j.close()
            jobs.forget(job_id)
        assert outcome.counts == {**outcome.counts, "documents": 1, "rejected": 0}
    finally:
        opensearch.indices.put_settings(index=index, body={"index.default_pipeline": None})
        opensearch.ingest.delete_pipeline(id=pipeline, ignore=[404])
        drop_knowledge_base(opensearch, neo4j_driver, redis_client, kb_name)


def test_only_a_worker_of_this_queue_counts_as_one(settings: Any, ingest_worker: Any) -> None:
    """A worker of another deployment sharing the broker answers pings but never takes
    this queue's chunks; `kgqr ingest` must start its own worker instead of waiting."""
    from ingest import job_runner
    from ingest.celery_app import app

    deadline = time.monotonic() + 60  # the session's worker may still be starting
    while job_runner.workers_consuming(app, settings.redis.ingest_queue) == 0:
        assert time.monotonic() < deadline, "the session's ingest worker never answered"
    assert job_runner.workers_consuming(app, f"{settings.redis.ingest_queue}-elsewhere") == 0


def test_a_stall_with_no_worker_on_the_queue_resends_nothing_and_says_so(
    settings: Any, ingest_worker: Any
) -> None:
    """`--worker never` with no worker: every stall re-sent every chunk not done, piling
    copies of each on a queue no one took, in silence."""
    from ingest import job_runner
    from ingest.celery_app import app

    said: list[str] = []
    queue = f"{settings.redis.ingest_queue}-elsewhere"

    def send_again() -> Any:
        raise AssertionError("chunks re-sent to a queue no worker takes")

    job_runner.resender(app, "job-1", send_again, said.append, queue)()
    assert said == [f"no progress on job job-1: no worker takes queue {queue} "
                    "(start one: kgqr ingest worker)"]  # fmt: skip


def test_the_worker_command_restarts_its_worker_and_an_interrupt_ends_both(
    settings: Any, unique_name: str
) -> None:
    """`kgqr ingest worker` as a user runs it: its Celery worker killed, a new one takes the
    same queue; Ctrl-C (SIGINT to the command) ends the worker with it, exit 0."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from ingest.celery_app import app

    def consuming() -> int:
        return job_runner.workers_consuming(app, unique_name)

    def wait_until(condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 90
        while not condition():
            assert time.monotonic() < deadline, what
            time.sleep(0.5)

    command = subprocess.Popen(
        [sys.executable, "-c", "from kgqr_ops.cli import main; main()", "ingest", "worker",
         "-Q", unique_name, "--hostname", f"{unique_name}@%h"],
        env={**os.environ, "KGQR_REDIS_URL": settings.redis.url},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_until(lambda: consuming() == 1, "the worker never took its queue")
        worker_pid = _only_child(command.pid)
        assert worker_pid is not None
        os.kill(worker_pid, signal.SIGKILL)
        wait_until(lambda: _only_child(command.pid) not in (None, worker_pid),
                   "the killed worker was not started again")  # fmt: skip
        wait_until(lambda: consuming() == 1, "the new worker never took the queue")
        restarted = _only_child(command.pid)
        command.send_signal(signal.SIGINT)
        output, _ = command.communicate(timeout=60)
    finally:
        if command.poll() is None:  # a failed assertion: end the worker too (a session of its own)
            orphan = _only_child(command.pid)
            command.kill()
            if orphan is not None:
                os.kill(orphan, signal.SIGKILL)
    text = output.decode(errors="replace")
    assert command.returncode == 0, text
    assert f"ingest worker (pid {worker_pid}) ended with signal SIGKILL" in text
    assert f"ingest worker restarted (pid {restarted}, restart 1)" in text
    assert "Warm shutdown" in text
    assert restarted is not None and not _alive(restarted)


def _only_child(pid: int) -> int | None:
    """The process's one child, if any (each thread lists the children it started; the
    supervisor starts a restarted worker from its watcher thread)."""
    children = [child for task in Path(f"/proc/{pid}/task").iterdir()
                for child in (task / "children").read_text().split()]  # fmt: skip
    assert len(children) <= 1, children
    return int(children[0]) if children else None


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_a_forgotten_job_is_not_made_again_by_its_late_chunks(redis_client: Any, jobs: Any) -> None:
    """A chunk running when its KB was dropped counted itself into a record without its
    KB, which every later chunk of the job took for a live job, and `progress` for a job
    without a state."""
    store, job = jobs
    store.start(job, "kb", "jsonl:x")
    store.forget(job)
    store.finish_enqueuing(job, chunks_total=2)
    assert store.complete_chunk(job, 0, {"documents": 3}) is False
    store.fail_chunk(job, 1, "late")
    store.note_retry(job, 1, "late")
    assert not store.exists(job) and store.progress(job) is None
    assert not redis_client.keys(f"kgqr:job:{job}*")


def test_a_resume_with_another_chunk_size_sends_every_record_again(
    redis_client: Any, unique_name: str
) -> None:
    """Chunks are numbered at their size: resumed with another, "chunks 0-2 done" skipped
    records never written (d6-d11 of twelve at 2 then 4), and the job said done."""
    from ingest.sources import open_source
    from tests.integration.ingest_helpers import TINY_KB

    store, kb = JobStore(redis_client), unique_name
    source = open_source(TINY_KB)
    every = sum(1 for _ in source.records())
    sent: list[tuple[int, int]] = []

    def send(job_id: str, chunk: int, records: list[dict[str, Any]], extract: bool) -> None:
        sent.append((chunk, len(records)))

    before = job_runner.job_id_for(source, kb, 2).rpartition("-")[0]  # ids had no size
    store.start(before, kb, "jsonl:x")
    first = job_runner._send_chunks(source, "jsonl:x", kb, store, send, 2, restart=True)
    assert not store.exists(before)  # unfinished for ever, it stopped `kgqr ingest reembed`
    second = first
    try:
        for chunk in range(3):  # a worker finished three chunks, then was killed
            store.complete_chunk(first.job_id, chunk, {"documents": 2})
        sent.clear()
        second = job_runner._send_chunks(source, "jsonl:x", kb, store, send, 4, restart=False)
        assert sum(size for _, size in sent) == every
        assert not store.exists(first.job_id)  # forgotten: it lists no more as unfinished
        assert second.replaced == (first.job_id,)  # and the CLI says so (it shows no log)
        # A chunk of the first cut, still running, does not count into the second's.
        assert store.complete_chunk(first.job_id, 3, {"documents": 2}) is False
        assert not store.is_done(second.job_id, 3)
        sent.clear()  # the same size again resumes: nothing done is sent twice
        store.complete_chunk(second.job_id, 0, {"documents": 4})
        job_runner._send_chunks(source, "jsonl:x", kb, store, send, 4, restart=False)
        assert 0 not in [chunk for chunk, _ in sent] and sent
    finally:
        store.forget(first.job_id)
        store.forget(second.job_id)
