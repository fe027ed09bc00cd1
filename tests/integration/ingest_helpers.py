"""Running ingest jobs from tests through the real Celery path."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ingest import job_runner
from ingest.job_store import JobProgress, JobStore
from ingest.kb_removal import drop_knowledge_base
from ingest.sources import open_source
from ingest.tasks import chunk_sender
from kgqr_core.settings import Settings
from plugin import schema

TINY_KB = f"jsonl:{Path(__file__).resolve().parents[1] / 'fixtures' / 'tiny_kb'}"


def enqueue_source(
    settings: Settings, opensearch: Any, neo4j: Any, redis: Any, spec: str, kb: str, **options: Any
) -> job_runner.EnqueuedJob:
    dimension = job_runner.prepare_stores(settings, opensearch, neo4j)
    limit = options.pop("limit", None)
    queue = options.pop("queue", None)

    return job_runner.enqueue(
        open_source(spec, limit=limit), spec, kb, settings=settings, opensearch=opensearch,
        jobs=JobStore(redis), send=chunk_sender(kb, queue), dimension=dimension, **options,
    )  # fmt: skip


def run_to_end(
    settings: Settings, opensearch: Any, neo4j: Any, redis: Any, spec: str, kb: str,
    timeout_s: float = 240, **options: Any,
) -> tuple[job_runner.EnqueuedJob, JobProgress]:  # fmt: skip
    enqueued = enqueue_source(settings, opensearch, neo4j, redis, spec, kb, **options)
    progress = job_runner.follow(JobStore(redis), enqueued.job_id, lambda _p: None, timeout_s)
    assert progress.finished, f"job did not finish in {timeout_s}s: {progress}"
    opensearch.indices.refresh(index=f"kgqr-{kb}-*")
    return enqueued, progress


@contextmanager
def ingested(
    settings: Settings, opensearch: Any, neo4j: Any, redis: Any, spec: str, kb: str
) -> Iterator[str]:
    """Knowledge base `kb` ingested afresh from `spec` for the block, dropped afterwards."""
    drop_knowledge_base(opensearch, neo4j, redis, kb)
    run_to_end(settings, opensearch, neo4j, redis, spec, kb)
    try:
        yield kb
    finally:
        drop_knowledge_base(opensearch, neo4j, redis, kb)


def document_ids(opensearch: Any, kb: str) -> list[str]:
    index = schema.documents_index(kb)
    opensearch.indices.refresh(index=index)
    hits = opensearch.search(index=index, body={"size": 10_000, "_source": False})["hits"]["hits"]
    return sorted(hit["_id"] for hit in hits)
