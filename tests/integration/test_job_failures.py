"""A chunk that fails for good ends its job as failed (against the real Redis), so the CLI
that follows it stops and exits non-zero instead of waiting forever."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from ingest import job_runner
from ingest.cli import ingest
from ingest.job_store import JobStore


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


def test_a_done_chunk_cannot_be_marked_failed(jobs: Any) -> None:
    store, job = jobs
    store.start(job, "kb", "jsonl:x")
    store.finish_enqueuing(job, chunks_total=1)
    store.complete_chunk(job, 0, {"documents": 1})
    store.fail_chunk(job, 0, "a late duplicate delivery failed")
    assert store.progress(job).state == "done"


def test_status_names_each_failed_chunk_and_why(jobs: Any, settings: Any) -> None:
    store, job = jobs
    store.start(job, "kb", "jsonl:x")
    store.finish_enqueuing(job, chunks_total=1)
    store.fail_chunk(job, 0, "ValueError: no letters or digits")
    result = CliRunner().invoke(ingest, ["status", job])
    assert result.exit_code == 0, result.output
    assert "[failed]" in result.output
    assert "chunk 0 FAILED: ValueError: no letters or digits" in result.output


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
