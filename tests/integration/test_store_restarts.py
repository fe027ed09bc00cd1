"""The broker (Redis) and the graph store (Neo4j) restarted in the middle of an ingest
job: the job completes, and every document and relation is in both stores exactly once.
These restart the session's own services (gracefully: Redis saves its data on the way
down, as a packaged redis-server does); the session's clients and worker reconnect (or,
when Celery's race ends the worker, its supervisor starts another: ingest/worker_supervisor.py).

After a broker restart the worker keeps the chunks it held as "running" forever and the
broker returns their messages only after its visibility timeout (an hour), so the job
stalls: `kgqr ingest` re-sends the chunks not done after a stall (job_runner.resender),
which is what this test drives too."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ingest import job_runner
from ingest.celery_app import app as celery_app
from ingest.job_store import JobStore
from ingest.kb_removal import drop_knowledge_base
from ingest.verify import verify
from kgqr_core.settings import Settings
from kgqr_ops.services.local_service import LocalService
from kgqr_ops.services.neo4j_server import Neo4jServer
from kgqr_ops.services.redis_server import RedisServer
from tests.integration.ingest_helpers import enqueue_source

DOCUMENTS = 600


def _source(folder: Path) -> str:
    with (folder / "documents.jsonl").open("w") as out:
        for i in range(DOCUMENTS):
            note = {"id": f"d{i}", "type": "note", "title": f"Note {i}",
                    "fields": {"text": f"note {i} about {i % 13}"}}  # fmt: skip
            out.write(json.dumps(note) + "\n")
    with (folder / "relations.jsonl").open("w") as out:
        for i in range(1, DOCUMENTS):
            out.write(json.dumps({"source": f"d{i}", "type": "follows",
                                  "target": f"d{i - 1}"}) + "\n")  # fmt: skip
    return f"jsonl:{folder}"


def _restart(service: LocalService) -> None:
    if service.process.pid() is None:
        pytest.skip(f"{service.name} was not started by `kgqr services up`: not ours to restart")
    service.down()
    service.up()


@pytest.mark.parametrize("service", [RedisServer, Neo4jServer], ids=["redis", "neo4j"])
def test_a_store_restarted_mid_job_loses_and_duplicates_nothing(
    service: Callable[[Settings], LocalService], settings: Settings, opensearch: Any,
    neo4j_driver: Any, redis_client: Any, ingest_worker: Any, kb_name: str, tmp_path: Path,
) -> None:  # fmt: skip
    spec = _source(tmp_path)
    job = enqueue_source(settings, opensearch, neo4j_driver, redis_client, spec, kb_name,
                         chunk_size=20)  # fmt: skip
    jobs = JobStore(redis_client)
    deadline = time.monotonic() + 120
    while (jobs.progress(job.job_id) or job).chunks_done < 3:  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.1)
    _restart(service(settings))
    # What `kgqr ingest` does while it follows a job: a stall re-sends the chunks not done
    # (after 10 s here, not the CLI's 120: a chunk of 20 notes takes about a second).
    resent: list[str] = []
    resend = job_runner.resender(
        celery_app, job.job_id,
        lambda: enqueue_source(settings, opensearch, neo4j_driver, redis_client, spec, kb_name,
                               chunk_size=20),
        resent.append, settings.redis.ingest_queue,
    )  # fmt: skip
    progress = job_runner.follow(jobs, job.job_id, lambda _p: None, timeout_s=400,
                                 on_stall=resend, stall_s=10)  # fmt: skip
    assert progress.finished and not progress.failed, progress
    assert progress.counts["documents"] == DOCUMENTS  # each chunk counted once
    opensearch.indices.refresh(index=f"kgqr-{kb_name}-*")
    report = verify(opensearch, neo4j_driver, kb_name)
    assert report.opensearch_counts == {"note": DOCUMENTS} == report.neo4j_counts
    assert report.relation_counts == {"FOLLOWS": DOCUMENTS - 1}
    drop_knowledge_base(opensearch, neo4j_driver, redis_client, kb_name)
