"""Celery tasks of the ingest pipeline."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from ingest.celery_app import app
from ingest.chunk_ingest import ChunkOutcome, ingest_chunk
from ingest.transient_errors import is_transient
from ingest.worker_resources import WorkerResources
from kgqr_core.settings import get_settings

MAX_RETRIES = 8
log = logging.getLogger("kgqr.ingest")


def _resources(model: str | None = None) -> WorkerResources:
    """A worker's connections and the embedder a chunk names: the one its job was checked
    against, whatever this worker's own KGQR_EMBEDDER_MODEL (workers of several
    deployments, or of an ingest with another model, share a queue). A chunk sent before
    chunks named their model gets the worker's own."""
    return _resources_for(model or get_settings().embedder.model)


@lru_cache(maxsize=4)
def _resources_for(model: str) -> WorkerResources:
    return WorkerResources(get_settings().replaced({"embedder_model": model}))


@app.task(bind=True, name="kgqr.ingest.chunk", max_retries=MAX_RETRIES, acks_late=True)
def ingest_chunk_task(
    self: Any,
    job_id: str,
    kb: str,
    chunk: int,
    records: list[dict[str, Any]],
    extract_triples: bool = False,
    model: str | None = None,
) -> dict[str, Any]:
    """Ingest one chunk; transient store or LLM failures retry with exponential backoff."""
    try:
        resources = _resources(model)
        token = self.request.id or f"{job_id}:{chunk}"
        with resources.leases.writing(resources.jobs.key(job_id), kb, token) as held:
            if not held:
                # Its job was forgotten (`kgqr ingest drop`) while it waited in the queue:
                # writing it would bring a dropped knowledge base back.
                log.warning(
                    "a chunk of a job no longer on record was set aside unwritten",
                    extra={"kgqr": {"job": job_id, "kb": kb, "chunk": chunk}},
                )
                return _report(chunk, ChunkOutcome(skipped=True))
            outcome = ingest_chunk(resources, job_id, kb, chunk, records, extract_triples)
    except Exception as exc:
        if is_transient(exc) and self.request.retries < MAX_RETRIES:
            countdown = min(2**self.request.retries, 60)
            _resources(model).jobs.note_retry(
                job_id, chunk, f"retry {self.request.retries + 1} in {countdown}s: {exc}"
            )
            raise self.retry(exc=exc, countdown=countdown) from exc
        # For good: say so in the job, so `kgqr ingest` ends (non-zero) instead of waiting.
        _resources(model).jobs.fail_chunk(job_id, chunk, f"{type(exc).__name__}: {exc}")
        raise
    return _report(chunk, outcome)


def _report(chunk: int, outcome: ChunkOutcome) -> dict[str, Any]:
    return {
        "chunk": chunk,
        "skipped": outcome.skipped,
        "counts": outcome.counts,
        "problems": outcome.problems[:20],
        "llm_calls": outcome.llm_calls,
        "cached_llm_calls": outcome.cached_llm_calls,
    }


def chunk_sender(
    kb: str, queue: str | None = None, model: str | None = None
) -> Callable[[str, int, list[Any], bool], None]:
    """What job_runner.enqueue calls for each chunk: a Celery task on `queue` (default
    queue when None) naming the embedder (default: this process's KGQR_EMBEDDER_MODEL,
    the one enqueue checked the knowledge base against)."""
    model = model or get_settings().embedder.model

    def send(job_id: str, chunk: int, records: list[Any], extract_triples: bool) -> None:
        ingest_chunk_task.apply_async(
            args=[job_id, kb, chunk, records, extract_triples, model], queue=queue
        )

    return send
