"""Turning a source into Celery chunk tasks, and following them to the end.

The job id is derived from the knowledge base and the source's fingerprint, so running
the same command again resumes the same job: chunks already recorded as done are not
sent again, and chunks that were lost with a killed worker are. Run again with another
chunk size, it is another job, and the first is forgotten.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from ingest import graph_projection, reembed
from ingest.chunking import DEFAULT_CHUNK_SIZE, chunks
from ingest.held_chunks import put_back_held_chunks
from ingest.job_store import JobProgress, JobStore
from ingest.sources.base import Source
from ingest.transient_errors import BROKER_ERRORS
from ingest.worker_supervisor import SupervisedWorker, restart_policy, to_stderr, worker_command
from kgqr_core.embedder import embedder_dimension
from kgqr_core.embedder_models import document_revision
from kgqr_core.settings import Settings
from plugin import installer, kb_meta
from plugin.field_map import mapped_fields
from plugin.kb_meta import DocumentStructure, KnowledgeBaseMeta
from plugin.schema import check_kb_name, documents_index

log = logging.getLogger("kgqr.ingest")


@dataclass(frozen=True)
class EnqueuedJob:
    job_id: str
    chunks_total: int
    chunks_sent: int
    chunks_already_done: int
    structure: DocumentStructure
    # The same source's jobs at another chunk size, forgotten: every chunk is sent again.
    replaced: tuple[str, ...] = ()


def job_id_for(source: Source, kb: str, chunk_size: int) -> str:
    """The same source into the same KB at the same chunk size is the same job, resumed.
    A chunk's number names its records only at its size: resumed at another, "chunk 3
    done" skipped records never written, and the job said done."""
    return f"{kb}-{source.kind}-{source.fingerprint()}-{chunk_size}"


def prepare_stores(settings: Settings, opensearch: Any, neo4j: Any) -> int:
    """Install kgqr's schema into both stores; returns the embedder's dimension."""
    dimension = embedder_dimension(settings.embedder.model)
    installer.install_opensearch(opensearch, dimension, settings.rewrite, replace_pipelines=False)
    installer.install_neo4j(neo4j)
    return dimension


def with_kb_model(settings: Settings, recorded: str | None) -> Settings:
    """A knowledge base keeps the model its vectors came from: the default model only
    chooses a new one's. A model set on purpose (environment or file) stays, and
    check_embedder refuses it where it differs from the recorded one."""
    if recorded is None or "model" in settings.embedder.model_fields_set:
        return settings
    return settings.replaced({"embedder_model": recorded})


def keep_kb_model(settings: Settings, opensearch: Any, kb: str) -> Settings:
    """`settings` embedding with the model `kb` records, where it exists and is kgqr's own."""
    existing = kb_meta.load(opensearch, kb)
    own = existing is not None and existing.attached is None
    return with_kb_model(settings, existing.embedder if own and existing else None)


def check_embedder(opensearch: Any, kb: str, settings: Settings) -> None:
    """Refuse to add vectors of one model to a knowledge base holding another's: both
    would answer k-NN searches, and their scores would mean nothing together."""
    existing = kb_meta.load(opensearch, kb)
    if existing is None:
        _check_unrecorded_index(opensearch, kb, settings.embedder.model)
        return
    if existing.attached is not None:
        raise ValueError(
            f"knowledge base {kb!r} is the attached index {existing.attached.index}: kgqr "
            f"writes nothing to it; build its graph with `kgqr kb graph {kb} ...`"
        )
    model = settings.embedder.model
    if existing.embedder != model:
        raise ValueError(
            f"knowledge base {kb!r} holds vectors of {existing.embedder}, and this ingest "
            f"embeds with {model} (KGQR_EMBEDDER_MODEL): ingest with "
            f"KGQR_EMBEDDER_MODEL={existing.embedder}, or into another knowledge base"
        )
    if existing.document_revision != document_revision(model):
        raise ValueError(
            f"knowledge base {kb!r} holds vectors of {model} made in an older document "
            f"form (revision {existing.document_revision}, now {document_revision(model)}):"
            f" run `kgqr ingest reembed --kb {kb} --model {model}` first"
        )


def _check_unrecorded_index(opensearch: Any, kb: str, model: str) -> None:
    """A documents index with no kgqr-meta record is one a dropped KB left, made again by
    a write after the drop from the templates of whichever model installed them last.
    Ingesting into it with vectors of another length set every document aside (1,792
    MuSiQue passages, all rejected as `[vector] ... null`); say so before a job starts."""
    name = documents_index(kb)
    if not opensearch.indices.exists(index=name):
        return
    mappings = opensearch.indices.get_mapping(index=name).values()
    vectors = [mapped_fields(index.get("mappings") or {}).get("vector") for index in mappings]
    held = sorted({field.dimension for field in vectors if field and field.dimension})
    wanted = embedder_dimension(model)
    if held and held != [wanted]:
        raise ValueError(
            f"{name} exists with no kgqr-meta record (left by a dropped knowledge base?) and "
            f"holds {'/'.join(map(str, held))}-dimension vectors, where {model} makes "
            f"{wanted}: `kgqr ingest drop --kb {kb}` removes it"
        )


def check_ingest(
    source: Source, spec: str, kb: str, *, settings: Settings, opensearch: Any, jobs: JobStore
) -> None:
    """What refuses an ingest before anything is made or sent (ValueError, saying why):
    asked by the CLI before it starts a worker too."""
    check_kb_name(kb)
    check_embedder(opensearch, kb, settings)
    source.structure()  # a structure.json that does not parse
    reembedding_to = reembed.in_progress(jobs.redis, kb)
    if reembedding_to is not None:
        raise ValueError(
            f"knowledge base {kb!r} is being re-embedded with {reembedding_to}: what this "
            "ingest writes would miss the new index; finish `kgqr ingest reembed` first"
        )


def enqueue(
    source: Source,
    spec: str,
    kb: str,
    *,
    settings: Settings,
    opensearch: Any,
    jobs: JobStore,
    send: Callable[[str, int, list[dict[str, Any]], bool], None],
    dimension: int,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    restart: bool = False,
) -> EnqueuedJob:
    """Stream the source into chunks and send those not yet done."""
    check_ingest(source, spec, kb, settings=settings, opensearch=opensearch, jobs=jobs)
    cut = _first_chunk_read(source, spec, chunk_size)
    new_kb = not opensearch.indices.exists(index=documents_index(kb))
    installer.ensure_kb_index(
        opensearch,
        kb,
        "documents",
        dimension,
        settings.opensearch.kb_shards,
        settings.opensearch.kb_replicas,
    )
    installer.add_new_fields(opensearch, kb, "documents")
    if new_kb:  # an empty graph's copy is whole; an older KB's is made by `kgqr kb project`
        graph_projection.create_for_new_kb(settings, opensearch, kb)
    # Recorded before sending too: chunks are sent as workers take them, and a KB being
    # ingested is listed, and refuses another model's ingest, from its first chunk.
    _record_kb(opensearch, kb, settings, dimension, source.structure(), create=True)
    job = _send_chunks(source, spec, kb, jobs, send, chunk_size, restart, cut)
    # Not made again: a record gone since was dropped (KnowledgeBaseGone says so).
    _record_kb(opensearch, kb, settings, dimension, job.structure, create=False)
    return job


def _record_kb(
    opensearch: Any,
    kb: str,
    settings: Settings,
    dimension: int,
    structure: DocumentStructure,
    *,
    create: bool,
) -> None:
    created = KnowledgeBaseMeta(
        kb=kb,
        structure=structure,
        embedder=settings.embedder.model,
        dimension=dimension,
        document_revision=document_revision(settings.embedder.model),
    )
    made = created.model_dump(include={"structure", "embedder", "dimension", "document_revision"})
    kb_meta.record(opensearch, kb, {**made, "structure": structure},
                   create=created if create else None)  # fmt: skip


class EmptySource(ValueError):
    """A source with no record at all: an empty export, or the wrong file."""


def _first_chunk_read(source: Source, spec: str, chunk_size: int) -> Iterator[list[dict]]:
    """The source's chunks, the first read already: asked before any index is made, an
    empty source made a knowledge base with no documents, listed by `kgqr kb list`, and a
    job of 0 chunks that ended "[done]". Read once (a STaRK source loads whole first)."""
    cut = chunks(source, chunk_size)
    first = next(cut, None)
    if first is None:
        raise EmptySource(
            f"{spec} holds no records: nothing was ingested, and no knowledge base was made"
            " (check the path, and that the files are in the source's format)"
        )
    return itertools.chain([first], cut)


def enqueue_graph(
    source: Source,
    spec: str,
    kb: str,
    *,
    opensearch: Any,
    jobs: JobStore,
    send: Callable[[str, int, list[dict[str, Any]], bool], None],
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    restart: bool = False,
) -> EnqueuedJob:
    """Send the chunks of an attached index's graph (Link records: Neo4j only), resumable
    as any ingest job; its relation names join the knowledge base's structure."""
    meta = kb_meta.load(opensearch, kb)
    if meta is None:  # the CLI found it: dropped or detached since (a sync's middle)
        raise kb_meta.KnowledgeBaseGone(
            f"{kb!r} is no longer recorded in kgqr-meta (dropped or detached meanwhile): "
            "no graph job was sent"
        )
    if meta.attached is None:
        raise ValueError(
            f"knowledge base {kb!r} is not an attached index: attach one with "
            f"`kgqr kb attach {kb} --index INDEX` first"
        )
    # Triples read from its fields carry their evidence, a field older indices lack.
    installer.add_new_fields(opensearch, kb, "triples")
    job = _send_chunks(source, spec, kb, jobs, send, chunk_size, restart)
    kb_meta.record(opensearch, kb, {"structure": job.structure})
    return job


def _send_chunks(
    source: Source,
    spec: str,
    kb: str,
    jobs: JobStore,
    send: Callable[[str, int, list[dict[str, Any]], bool], None],
    chunk_size: int,
    restart: bool,
    cut: Iterator[list[dict[str, Any]]] | None = None,
) -> EnqueuedJob:
    """Stream the source into chunks (`cut`: begun already), send those not yet done, and
    read its structure: first, so a structure.json that does not parse stops the job
    before any chunk is sent (read after the last, it left every chunk written and the KB
    unlisted)."""
    given = source.structure()
    job_id = job_id_for(source, kb, chunk_size)
    replaced = tuple(jobs.others_of_stem(job_id.rpartition("-")[0], job_id))
    for other in replaced:
        # Its chunks still running complete into a job no longer on record (ignored), not
        # into this one's numbering.
        log.info("%s was cut at another chunk size: it is forgotten and every chunk is "
                 "sent at %d (writes are idempotent)", other, chunk_size)  # fmt: skip
        jobs.forget(other)
    if restart:
        jobs.forget(job_id)
    jobs.start(job_id, kb, spec)
    done = jobs.done_chunks(job_id)
    types: dict[str, dict[str, None]] = {}
    relations: dict[str, None] = {}
    sent = 0
    total = 0
    for chunk_no, chunk in enumerate(cut if cut is not None else chunks(source, chunk_size)):
        total = chunk_no + 1
        for record in chunk:
            if record["kind"] == "document":
                types.setdefault(record["type"], {}).update(dict.fromkeys(record["fields"]))
            elif record["kind"] in ("relation", "link"):
                relations[record["type"]] = None
        if chunk_no not in done:
            if not jobs.exists(job_id):
                raise _dropped_while_sending(kb, sent)
            send(job_id, chunk_no, chunk, source.extract_triples)
            sent += 1
    if not jobs.finish_enqueuing(job_id, total):
        raise _dropped_while_sending(kb, sent)
    seen = DocumentStructure(
        types={name: list(fields) for name, fields in types.items()}, relations=list(relations)
    )
    structure = given.merge(seen)
    return EnqueuedJob(job_id, total, sent, total - sent, structure, replaced)


class JobForgotten(ValueError):
    """A job forgotten while its chunks were being sent."""


def _dropped_while_sending(kb: str, sent: int) -> JobForgotten:
    """Its chunks would skip; its kgqr-meta record, saved after the last one, would make a
    KB with no indices show in `kgqr kb list`. Asked before each chunk, so a large source
    stops early, and once more after the last, so a drop after it (or a re-run with every
    chunk done) is caught too."""
    return JobForgotten(
        f"this job of {kb!r} was forgotten while its chunks were sent ({sent} sent): the "
        "knowledge base dropped, `kgqr ingest forget`, or the same source run at another "
        "chunk size; nothing more of it is written"
    )


def follow(
    jobs: JobStore,
    job_id: str,
    on_progress: Callable[[JobProgress], None],
    timeout_s: float | None = None,
    poll_s: float = 0.2,
    on_stall: Callable[[], None] | None = None,
    stall_s: float = 120.0,
) -> JobProgress:
    """Poll until every chunk is done (or timeout_s passes); returns the last progress.

    Redis going away (a broker restart) is waited out, not raised. With `on_stall`, a job
    that made no progress for `stall_s` calls it: after a broker restart the messages a
    worker held unacknowledged come back only after the broker's visibility timeout (an
    hour), so the caller re-sends the chunks not done (ingest is idempotent)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    last: JobProgress | None = None
    moved = time.monotonic()
    while True:
        try:
            progress = jobs.progress(job_id)
        except BROKER_ERRORS:
            progress = None
            if last is None:
                raise
        if progress is None and last is None:
            raise KeyError(f"no ingest job {job_id!r}")
        if progress is not None:
            if last is None or (progress.chunks_done, len(progress.failed)) != (
                last.chunks_done,
                len(last.failed),
            ):
                moved = time.monotonic()
            last = progress
            on_progress(progress)
            if progress.finished:
                return progress
        if deadline is not None and time.monotonic() > deadline:
            assert last is not None  # the first read either answered or raised
            return last
        if on_stall is not None and progress is not None and time.monotonic() - moved > stall_s:
            with contextlib.suppress(*BROKER_ERRORS):  # the broker is back at the next stall
                on_stall()
            moved = time.monotonic()
        time.sleep(poll_s)


def resender(
    app: Any,
    job_id: str,
    send_again: Callable[[], EnqueuedJob],
    say: Callable[[str], None],
    queue: str | None = None,
) -> Callable[[], None]:
    """What `follow` calls on a stall: re-send the chunks not done (ingest is idempotent;
    a chunk done meanwhile is skipped). A chunk a worker still reports as running gets one
    more stall period first: a slow chunk is not a lost one — but a worker whose broker
    went away mid-chunk keeps reporting that chunk as running forever, so a second stall
    with the same tasks running re-sends anyway. With no worker taking `queue`, nothing
    is re-sent (the chunks wait on it; every stall piled another copy of each there), and
    the stall is said to be that."""
    held: set[str] = set()

    def resend() -> None:
        if queue is not None and none_consuming(app, queue):
            say(f"no progress on job {job_id}: no worker takes queue {queue} "
                "(start one: kgqr ingest worker)")  # fmt: skip
            return
        running = tasks_running_for(app, job_id)
        if running and not running <= held:
            held.clear()
            held.update(running)
            return
        held.clear()
        again = send_again()
        say(f"no progress on job {job_id}: re-sent {again.chunks_sent} chunks not done")

    return resend


def none_consuming(app: Any, queue: str) -> bool:
    """No worker answers for `queue`, as far as can be told: a broker that cannot be asked
    (restarting, the stall's usual cause) is not taken for an empty queue, and a worker
    starved of CPU gets a few seconds to answer (the stall came after two minutes)."""
    try:
        return workers_consuming(app, queue, timeout_s=5.0) == 0
    except Exception:
        return False


def tasks_running_for(app: Any, job_id: str, timeout_s: float = 1.5) -> set[str]:
    """Ids of the chunk tasks of `job_id` that workers report as running. A connection of
    its own: the pooled one may be a dead one to a broker that has since restarted."""
    with app.connection() as connection:
        active = app.control.inspect(timeout=timeout_s, connection=connection).active() or {}
    return {
        str(task.get("id"))
        for tasks in active.values()
        for task in tasks or []
        if repr(job_id) in str(task.get("args"))  # quoted: `kb-x-25` is no `kb-x-256`
    }


def workers_consuming(app: Any, queue: str, timeout_s: float = 1.5) -> int:
    """Workers that answer and take chunks from `queue`. A worker of another deployment
    or test run sharing the broker answers a ping too, but would never take these chunks:
    counting it left `kgqr ingest` waiting forever with no worker of its own. A
    connection of its own, as tasks_running_for's: the pooled one may be a dead one to a
    broker that has since restarted."""
    with app.connection() as connection:
        inspector = app.control.inspect(timeout=timeout_s, connection=connection)
        active = inspector.active_queues() or {}
    return sum(1 for queues in active.values() if any(q.get("name") == queue for q in queues or []))


@contextlib.contextmanager
def temporary_worker(
    settings: Settings,
    log_path: str | None = None,
    queues: str | None = None,
    env: dict[str, str] | None = None,
    restart: bool = True,
    say: Callable[[str], None] | None = None,
) -> Iterator[SupervisedWorker]:
    """A worker for the duration of one command, when no worker is running (`env`:
    further settings of its own, e.g. another OpenSearch), restarted if it dies on the way
    (ingest.worker_supervisor says why it can); `restart=False` to watch one die. `say`
    reports a restart (default: into the log, else stderr)."""
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
    # A name of its own even beside another temporary worker of this process (a test
    # session's): Celery merges the replies of workers that share a name.
    name = f"kgqr-temp-{os.getpid()}-{uuid.uuid4().hex[:6]}@%h"
    command = worker_command(["--hostname", name,
                              *(["-Q", queues] if queues else [])])  # fmt: skip
    say = say or _log_line(log)
    worker = SupervisedWorker(
        command, env={**os.environ, "KGQR_REDIS_URL": settings.redis.url, **(env or {})},
        output=log, policy=restart_policy(restart), say=say,
        before_restart=put_back_held_chunks(settings.redis.url, say),
    ).start()  # fmt: skip
    try:
        yield worker
    finally:
        worker.stop(timeout_s=30)
        if not isinstance(log, int):  # a file, not subprocess.DEVNULL
            log.close()


def _log_line(log: IO[bytes] | int) -> Callable[[str], None]:
    """Where a temporary worker's supervisor reports a restart: beside the worker's own log
    lines, or on stderr when its output is discarded."""
    if isinstance(log, int):
        return to_stderr

    def write(line: str) -> None:
        log.write(f"{line}\n".encode())
        log.flush()

    return write
