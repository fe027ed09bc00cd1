"""`kgqr ingest`: load a knowledge base into OpenSearch and Neo4j through Celery workers."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ingest.chunking import DEFAULT_CHUNK_SIZE, GRAPH_ONLY_PER_EMBEDDED
from kgqr_core.cli_groups import DefaultRunGroup
from kgqr_core.settings import get_settings
from kgqr_ops.cli_options import kb_option, known_kb, replicas_checked

if TYPE_CHECKING:
    from ingest.kb_removal import RemovedKnowledgeBase
    from ingest.queue_room import QueueRoom

RUN_HELP = """Load SOURCE (KIND:PATH) into knowledge base --kb.

\b
KIND is one of:
  jsonl:DIR        documents.jsonl (+ relations.jsonl, structure.json); see docs/architecture.md
  stark:DIR        a STaRK processed folder (node_info.pkl, edge_index.pt, ...)
  musique:DIR      MuSiQue corpus.json + openie_*.json triples (../shared/data/musique100)
  hotpotqa:DIR     HotpotQA corpus.json (../shared/data/hotpotqa100), title links
                   as document relations (for KAR)
  hotpotqa-kg:DIR  the same title links as a corpus KG with extractive TTRs (KG-CQR)
  passages:FILE    JSONL passages; the LLM extracts triples and TTRs (KG-CQR)

The source is split into chunks that Celery workers ingest. Running the same command
again resumes the same job (same job id): finished chunks are skipped, lost ones resent.
Bad records are set aside in the index kgqr-KB-deadletter (see `kgqr ingest rejected`).

\b
  kgqr ingest jsonl:./movies --kb movies
  kgqr ingest musique:../shared/data/musique100 --kb musique --chunk-size 50
"""


F = TypeVar("F", bound=Callable[..., Any])


def worker_option(command: F) -> F:
    """`--worker`, for every command that runs a Celery job."""
    return click.option(
        "--worker",
        type=click.Choice(["auto", "never"]),
        default="auto",
        show_default=True,
        help="auto: start a temporary worker when none answers.",
    )(command)


def job_options(command: F) -> F:
    """`--restart` and `--worker`, for every command that runs a resumable Celery job."""
    restart = click.option("--restart", is_flag=True, help="Forget earlier progress of this job.")
    return restart(worker_option(command))


@click.group("ingest", cls=DefaultRunGroup)
def ingest() -> None:
    """Load knowledge bases: `kgqr ingest SOURCE --kb NAME` (see `kgqr ingest run --help`)."""


@ingest.command("run", help=RUN_HELP)
@click.argument("source")
@kb_option("Knowledge-base name (lowercase, digits, - and _).")
@click.option(
    "--wait/--no-wait",
    default=True,
    show_default=True,
    help="Follow the job with a progress bar until every chunk is done, sending chunks as "
    "workers take them. --no-wait sends the whole source to Redis at once, for workers "
    "elsewhere (one larger than Redis's memory needs --wait).",
)
@click.option(
    "--chunk-size",
    type=click.IntRange(min=1),
    default=DEFAULT_CHUNK_SIZE,
    show_default=True,
    help=f"Documents and triples per Celery task; up to {GRAPH_ONLY_PER_EMBEDDED}x as many "
    "relations and mentions ride along.",
)
@click.option(
    "--limit", type=click.IntRange(min=1), default=None, help="Only the first N documents."
)
@job_options
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Stop waiting after N seconds.",
)
@click.option(
    "--shards",
    type=click.IntRange(1, 64),
    default=None,
    help="Primary shards of a new KB's indices (default KGQR_KB_SHARDS, 1).",
)
@click.option(
    "--replicas",
    default=None,
    callback=replicas_checked,
    help="Replicas of a new KB's indices: a number, or an auto-expanded range "
    "(default KGQR_KB_REPLICAS, 0-1: one wherever a second node exists).",
)
def run(source: str, kb: str, wait: bool, chunk_size: int, limit: int | None, restart: bool,
        worker: str, timeout: float | None, shards: int | None,
        replicas: str | None) -> None:  # fmt: skip

    from ingest import job_runner
    from ingest.job_store import JobStore
    from ingest.sources import open_source
    from ingest.tasks import chunk_sender
    from kgqr_core import connections
    from plugin import kb_meta

    try:  # a mistyped source is said before any store is reached
        loaded = open_source(source, limit=limit)
    except (ValueError, FileNotFoundError) as exc:
        raise click.BadParameter(str(exc), param_hint="SOURCE") from exc
    settings = get_settings()
    opensearch = connections.opensearch_client(settings)
    # Before any `replaced`: that marks every setting as set on purpose, and a model set on
    # purpose is not swapped for the one the KB records.
    settings = job_runner.keep_kb_model(settings, opensearch, kb)
    chosen = {"kb_shards": shards, "kb_replicas": replicas}
    try:
        settings = settings.replaced({k: v for k, v in chosen.items() if v is not None})
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--replicas") from exc
    jobs = JobStore(connections.redis_client(settings))
    with connections.neo4j_driver(settings) as neo4j:
        dimension = job_runner.prepare_stores(settings, opensearch, neo4j)

    def send(source_: Any, restart_: bool, room: QueueRoom | None) -> job_runner.EnqueuedJob:
        chunk_send = chunk_sender(kb, model=settings.embedder.model)
        try:  # dropped meanwhile, or the checks' refusals (a re-send's source changed)
            return job_runner.enqueue(
                source_, source, kb, settings=settings, opensearch=opensearch, jobs=jobs,
                send=room.bounded(chunk_send) if room else chunk_send,
                dimension=dimension, chunk_size=chunk_size, restart=restart_,
            )  # fmt: skip
        except (ValueError, kb_meta.KnowledgeBaseGone) as exc:
            raise click.ClickException(str(exc)) from exc

    try:  # another model's vectors, a re-embed under way, a bad structure.json: before a worker
        job_runner.check_ingest(loaded, source, kb, settings=settings, opensearch=opensearch,
                                jobs=jobs)  # fmt: skip
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    if not wait:  # sent whole, for workers elsewhere: `status` says when none takes them
        enqueued = send(loaded, restart, None)
        say_sent(enqueued, click.echo)
        click.echo(f"follow it with: kgqr ingest status {enqueued.job_id} (a worker must run: "
                   "`kgqr ingest worker`)")  # fmt: skip
        return
    final = follow_job(
        settings, jobs, kb, lambda room: send(loaded, restart, room),
        lambda room: send(open_source(source, limit=limit), False, room), worker, timeout,
    )  # fmt: skip
    _print_progress(final)
    if not final.finished:  # --timeout: the temporary worker is gone with this command
        click.echo(f"stopped waiting (--timeout): the job goes on only while a worker runs "
                   f"(kgqr ingest status {final.job_id}); the same command resumes it",
                   err=True)  # fmt: skip
    if final.counts.get("rejected"):
        click.echo(f"{final.counts['rejected']} records set aside, each with why: "
                   f"kgqr ingest rejected --kb {kb}", err=True)  # fmt: skip
    if not final.succeeded:
        raise SystemExit(1)
    opensearch.indices.refresh(index=f"kgqr-{kb}-*")  # searchable the moment we say "done"


def queue_room(settings: Any, jobs: Any, say: Callable[[str], None], **options: Any) -> QueueRoom:
    """How many of a job's chunks may wait in the broker (KGQR_INGEST_QUEUED_CHUNKS)."""
    from ingest import job_runner
    from ingest.celery_app import app
    from ingest.queue_room import AtWork, QueueRoom

    queue = settings.redis.ingest_queue

    def at_work(job_id: str) -> AtWork:
        running = frozenset(job_runner.tasks_running_for(app, job_id))
        return AtWork(running, int(jobs.redis.llen(queue)))

    return QueueRoom(
        jobs, settings.redis.ingest_queued_chunks, at_work=at_work,
        none_consuming=lambda: job_runner.none_consuming(app, queue), say=say, **options,
    )  # fmt: skip


def say_sent(enqueued: Any, say: Callable[[str], None]) -> None:
    for other in enqueued.replaced:  # the CLI shows no log: said here
        say(f"{other} cut this source at another chunk size: it is forgotten, and every "
            "chunk is sent at this one (writes are idempotent)")  # fmt: skip
    say(f"job {enqueued.job_id}: {enqueued.chunks_total} chunks "
        f"({enqueued.chunks_sent} sent, {enqueued.chunks_already_done} already done)")  # fmt: skip


def follow_job(
    settings: Any,
    jobs: Any,
    desc: str,
    start: Callable[[QueueRoom], Any],
    resend_chunks: Callable[[QueueRoom], Any],
    worker: str,
    timeout: float | None,
) -> Any:
    """Send a job's chunks (`start`) and follow it with a progress bar to its end,
    starting a temporary worker first when none takes the queue (`worker` "auto": chunks
    are sent as workers take them) and re-sending lost chunks when it stalls."""
    import time

    from tqdm import tqdm

    from ingest import job_runner
    from ingest.celery_app import app
    from ingest.queue_room import StoppedWaiting
    from ingest.transient_errors import BROKER_DOWN

    queue = settings.redis.ingest_queue
    no_worker = job_runner.workers_consuming(app, queue) == 0
    needs_worker = worker == "auto" and no_worker
    if needs_worker:
        click.echo(
            f"no worker takes queue {queue}; starting a temporary one "
            "(`kgqr ingest worker` runs one)"
        )
    elif no_worker:  # --worker never: the job waits for one, said rather than silent
        click.echo(f"no worker takes queue {queue} yet: the job waits until one does "
                   "(`kgqr ingest worker`)", err=True)  # fmt: skip
    context = (  # a restart's line goes above the bar, as the resender's does
        job_runner.temporary_worker(settings, say=lambda line: tqdm.write(line, file=sys.stderr))
        if needs_worker
        else contextlib.nullcontext()
    )
    if needs_worker:  # a SIGTERM ends the temporary worker too (its `finally`), no orphan
        signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(128 + signal.SIGTERM))
    interval = 0.5 if sys.stderr.isatty() else 15.0  # CI logs get a line every 15 s
    deadline = None if timeout is None else time.monotonic() + timeout
    bar = tqdm(total=None, unit="chunk", desc=desc, mininterval=interval)
    with context, bar:

        def show(progress: Any) -> None:
            bar.update(progress.chunks_done - bar.n)
            postfix = dict(progress.counts)
            if progress.retrying:  # a store down or an index blocked: say what it waits for
                postfix["retrying"] = next(iter(progress.retrying.values()))[:80]
            bar.set_postfix(postfix, refresh=False)

        try:
            enqueued = start(queue_room(settings, jobs, bar.write, on_wait=show,
                                        deadline=deadline))  # fmt: skip
        except StoppedWaiting as exc:  # --timeout while chunks were still being sent
            raise click.ClickException(
                f"stopped while sending (--timeout): job {exc.job_id} has chunks not sent "
                "yet; the same command sends them"
            ) from exc
        except BROKER_DOWN as exc:  # refused past the room's patience
            raise click.ClickException(
                f"Redis, the ingest broker, did not take chunks ({exc}): the same command, "
                "once it does, sends the rest"
            ) from exc
        say_sent(enqueued, bar.write)
        bar.total = enqueued.chunks_total
        bar.refresh()
        # No deadline: a re-send stopped halfway would leave the job without its total.
        again = queue_room(settings, jobs, bar.write, on_wait=show)
        resend = job_runner.resender(
            app, enqueued.job_id, lambda: resend_chunks(again), lambda line: bar.write(line),
            queue,
        )  # fmt: skip
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        final = job_runner.follow(jobs, enqueued.job_id, show, timeout_s=left,
                                  on_stall=resend)  # fmt: skip
    return final


@ingest.command()
@click.argument("job_id", required=False)
@kb_option("Every job of this knowledge base instead of one.", required=False)
def status(job_id: str | None, kb: str | None) -> None:
    """Show a job's state, chunks done and record counts (or every job of --kb, with
    their ids), and say when no worker takes the unfinished ones' chunks. Exits 1 when a
    job shown has failed chunks, or finished having written nothing (every record set
    aside), as `kgqr ingest` does."""
    from ingest.celery_app import app
    from ingest.job_runner import workers_consuming
    from ingest.job_store import JobStore
    from kgqr_core import connections

    if (job_id is None) == (kb is None):
        raise click.UsageError("give a JOB_ID or --kb")
    settings = get_settings()
    jobs = JobStore(connections.redis_client(settings))
    if job_id is not None:
        progress = jobs.progress(job_id)
        if progress is None:
            raise click.ClickException(f"no ingest job {job_id!r} (`--kb KB` lists a KB's)")
        found = [progress]
    else:
        found = jobs.jobs_of(kb or "")
        if not found:
            click.echo(f"no ingest job of {kb!r} is recorded")
    for progress in found:
        _print_progress(progress)
    if any(not p.finished for p in found) and not workers_consuming(
        app, settings.redis.ingest_queue
    ):
        click.echo("no worker takes this queue's chunks now: re-run the job's command (it "
                   "starts one), or run `kgqr ingest worker`")  # fmt: skip
    if any(p.failed or (p.finished and p.all_set_aside) for p in found):
        raise SystemExit(1)


@ingest.command()
@click.argument("job_ids", nargs=-1, required=True, metavar="JOB_ID...")
def forget(job_ids: tuple[str, ...]) -> None:
    """Forget ingest jobs that will not be resumed (their source changed since, so a re-run
    is another job): an unfinished one holds `kgqr ingest reembed` back. What they wrote
    stays in the knowledge base; a job whose chunks a worker is writing is refused."""
    from ingest.celery_app import app
    from ingest.job_runner import tasks_running_for
    from ingest.job_store import JobStore
    from kgqr_core import connections

    jobs = JobStore(connections.redis_client(get_settings()))
    for job_id in job_ids:
        if jobs.progress(job_id) is None:
            raise click.ClickException(f"no ingest job {job_id!r}")
        if tasks_running_for(app, job_id):
            raise click.ClickException(f"{job_id}: a worker is writing its chunks; wait for it")
    for job_id in job_ids:
        jobs.forget(job_id)
        click.echo(f"{job_id}: forgotten")


def _print_progress(progress: Any) -> None:
    total = progress.chunks_total if progress.chunks_total is not None else "?"
    updated = dt.datetime.fromtimestamp(progress.updated, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    click.echo(
        f"job {progress.job_id} [{progress.state}] kb={progress.kb} source={progress.source}"
    )
    click.echo(f"  chunks {progress.chunks_done}/{total}, updated {updated} UTC")
    click.echo("  " + ", ".join(f"{name} {count}" for name, count in progress.counts.items()))
    for chunk, reason in sorted(progress.failed.items()):
        click.echo(f"  chunk {chunk} FAILED: {reason} (re-run the same command to retry it)")
    for chunk, reason in sorted(progress.retrying.items()):
        click.echo(f"  chunk {chunk} RETRYING: {reason}")
    if progress.finished and progress.all_set_aside:
        click.echo("  nothing was written: every record read was set aside", err=True)


def _check_known(opensearch: Any, kb: str) -> None:
    """A mistyped --kb is an error: an empty report would read as "all is well"."""
    from plugin import kb_meta, schema

    index = schema.documents_index(kb)
    if kb_meta.load(opensearch, kb) is None and not opensearch.indices.exists(index=index):
        raise click.ClickException(
            f"no knowledge base {kb!r}: {schema.META_INDEX} does not list it and there is "
            f"no index {index} (check the name; ingest it with `kgqr ingest SOURCE --kb {kb}`)"
        )


@ingest.command("verify")
@kb_option("Knowledge base to check.")
def verify_command(kb: str) -> None:
    """Compare per-type counts in OpenSearch and Neo4j; exit 1 on any mismatch."""
    from ingest.verify import verify
    from kgqr_core import connections

    settings = get_settings()
    opensearch = connections.opensearch_client(settings)
    with connections.neo4j_driver(settings) as neo4j:
        report = verify(opensearch, neo4j, kb)
    if report.empty:
        _check_known(opensearch, kb)
    click.echo(f"{'type':<24} {'opensearch':>10} {'neo4j':>10}")
    for name in sorted(set(report.opensearch_counts) | set(report.neo4j_counts)):
        os_n, neo_n = report.opensearch_counts.get(name, 0), report.neo4j_counts.get(name, 0)
        flag = "" if os_n == neo_n else "  MISMATCH"
        click.echo(f"{name:<24} {os_n:>10} {neo_n:>10}{flag}")
    click.echo(f"entities {report.entities}, triples indexed {report.triples_indexed}")
    click.echo(
        "relations: " + ", ".join(f"{k} {v}" for k, v in sorted(report.relation_counts.items()))
    )
    if report.dangling_nodes:
        click.echo(
            f"nodes referenced by relations but with no document: {report.dangling_nodes[:10]}"
        )
    if not report.ok:
        raise SystemExit(1)


@ingest.command()
@kb_option("Knowledge base whose set-aside records to list.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=20, show_default=True,
              help="Newest records to list.")  # fmt: skip
@click.option("--job", "job_id", default=None, help="Only those of this job.")
@click.option("--clear", is_flag=True,
              help="Remove them (those of --job only, with it): once fixed and sent again, "
                   "they would still be listed.")  # fmt: skip
def rejected(kb: str, limit: int, job_id: str | None, clear: bool) -> None:
    """List records set aside in the dead-letter index, with their reasons. Fix them in
    the source and run the same `kgqr ingest` again (it sends the whole source anew when
    the source changed); then `--clear` removes the old entries."""
    from kgqr_core import connections
    from plugin import schema

    client = connections.opensearch_client(get_settings())
    index = schema.deadletter_index(kb)
    if not client.indices.exists(index=index):
        _check_known(client, kb)
        click.echo("no rejected records")
        return
    query = {"term": {"job_id": job_id}} if job_id else {"match_all": {}}
    if clear:
        removed = client.delete_by_query(index=index, body={"query": query}, refresh=True)
        click.echo(f"{removed['deleted']} rejected records removed")
        return
    body = {"size": limit, "sort": [{"timestamp": "desc"}], "query": query}
    hits = client.search(index=index, body=body)["hits"]
    click.echo(f"{hits['total']['value']} rejected records (newest first):")
    for hit in hits["hits"]:
        src = hit["_source"]
        click.echo(f"- job {src['job_id']} chunk {src['chunk']} [{src['stage']}] {src['reason']}")
        record = src["record"]
        # The line as the source held it, not the reason and kind again before it.
        shown = record.get("raw") if isinstance(record, dict) and "raw" in record else record
        text = shown if isinstance(shown, str) else json.dumps(shown, ensure_ascii=False)
        click.echo(f"    {text[:300]}")


def dropped_saying_so(opensearch: Any, kb: str) -> RemovedKnowledgeBase:
    """drop_knowledge_base as the commands run it: saying what it waits for, and warning
    of chunks it stopped waiting for."""
    from ingest.kb_removal import drop_knowledge_base
    from ingest.write_leases import SETTLE_S
    from kgqr_core import connections
    from query_rewriter.graph.shared_copies import SharedCopies

    settings = get_settings()
    with connections.neo4j_driver(settings) as neo4j:
        removed = drop_knowledge_base(
            opensearch, neo4j, connections.redis_client(settings), kb,
            say=lambda line: click.echo(line, err=True),
        )  # fmt: skip
    if copies := SharedCopies.of_machine(settings):  # this machine's graph copies of it
        copies.remove(kb)
    if removed.still_writing:
        click.echo(
            f"warning: {len(removed.still_writing)} chunks of {kb} were still being written "
            f"after {SETTLE_S:.0f} s (tasks {', '.join(removed.still_writing)}); what they "
            "write may bring documents of it back: drop it again once they end",
            err=True,
        )
    return removed


@ingest.command()
@kb_option("Knowledge base to delete.")
@click.confirmation_option(prompt="Delete this knowledge base from OpenSearch, Neo4j and Redis?")
def drop(kb: str) -> None:
    """Delete a knowledge base everywhere: indices, kgqr-meta entry, graph, job records.
    Chunks that workers are still writing are waited for first, so that none brings the
    knowledge base back."""
    from kgqr_core import connections

    removed = dropped_saying_so(connections.opensearch_client(get_settings()), kb)
    if not (removed.recorded or removed.indices or removed.nodes or removed.jobs):
        # Not an error (a drop is safe to repeat), but a mistyped name left the KB meant.
        click.echo(f"nothing to drop: no knowledge base {kb!r} (`kgqr kb list` lists them)")
        return
    click.echo(
        f"dropped {kb}: indices {', '.join(removed.indices) or 'none'}; "
        f"{removed.nodes} graph nodes; {removed.jobs} job records"
    )


@ingest.command()
@kb_option("The knowledge base to re-embed.")
@click.option("--model", required=True, help="The embedder its vectors should come from.")
@click.option("--restart", is_flag=True, help="Drop an unfinished re-embed and start over.")
def reembed(kb: str, model: str, restart: bool) -> None:
    """Give a knowledge base new vectors from another embedder, with no downtime.

    \b
    Documents (and triples) are copied with new vectors into versioned indices while
    searches keep reading the old ones; then both names are swapped to the new indices
    in one atomic alias change, the old indices deleted, and the KB's meta records the
    new model (the proxy embeds queries with it from then on). Interrupted? Run the same
    command again: it resumes where the copy stopped. An ingest into the KB is refused
    meanwhile.
    """
    from tqdm import tqdm

    from ingest import reembed as reembedding
    from kgqr_core import connections
    from kgqr_core.embedder import get_embedder
    from plugin import kb_meta

    settings = get_settings()
    opensearch = connections.opensearch_client(settings)
    redis = connections.redis_client(settings)
    known_kb(opensearch, kb)  # before a model's minute-long load
    click.echo(f"loading {model} ...")
    embedder = get_embedder(model)
    bars: dict[str, Any] = {}

    def show(progress: reembedding.Progress) -> None:
        bar = bars.get(progress.role)
        if bar is None:
            bar = bars[progress.role] = tqdm(total=progress.total, unit="doc", desc=progress.role)
        bar.update(progress.copied - bar.n)

    try:
        done = reembedding.reembed(
            opensearch, redis, kb, embedder, embedder.dimension, show, restart=restart
        )
    except reembedding.ReembedError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        for bar in bars.values():
            bar.close()
    for copy in done.copies:
        click.echo(f"{copy.name} -> {copy.target} ({copy.copied} documents)")
    click.echo(f"{kb} now holds vectors of {model} ({embedder.dimension} dimensions)")
    meta = kb_meta.load(opensearch, kb)
    if meta is not None and meta.default and (told := meta.default.other_vectors(meta.embedder)):
        click.echo(f"its default {told}", err=True)


@ingest.command()
@click.argument("schema", type=click.Choice(["catalog", "library"]))
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--documents",
    type=click.IntRange(100),
    default=None,
    help="How many documents (catalog: 20,000; library: 8,000).",
)
@click.option("--seed", type=int, default=None, help="Random seed (the schema's own default).")
def generate(schema: str, directory: Path, documents: int | None, seed: int | None) -> None:
    """Write a generated semi-structured KB into DIRECTORY (documents.jsonl,
    relations.jsonl, structure.json), for `kgqr ingest jsonl:DIRECTORY --kb NAME`.

    catalog: products, brands, categories, countries (STaRK-Amazon-like; 20k documents,
    ~106k relations). library: papers, authors, institutions, venues, fields
    (STaRK-MAG-like). Deterministic: the same arguments write the same files."""
    from ingest.generators import GENERATORS

    generator = GENERATORS[schema]
    options = {k: v for k, v in (("documents", documents), ("seed", seed)) if v is not None}
    kb = generator(**options)
    kb.write(directory)
    click.echo(f"{directory}: {len(kb.documents)} documents, {len(kb.edges)} relations")


@ingest.command(context_settings={"ignore_unknown_options": True})
@click.option(
    "--restart/--no-restart",
    default=True,
    show_default=True,
    help="Restart the worker when it exits unasked (a Redis restart can end it); "
    "--no-restart under a supervisor of your own (systemd, Kubernetes).",
)
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
def worker(restart: bool, celery_args: tuple[str, ...]) -> None:
    """Run a Celery ingest worker (extra arguments go to `celery worker`, e.g. -Q QUEUE,
    --pool solo). It runs as a child process: one that exits with an error is started
    again (after 1-30 s, up to 5 quick exits in a row), and the chunks it held go back on
    their queues first; exit 0, Ctrl-C, SIGTERM or a closed terminal end both."""
    from ingest.held_chunks import put_back_held_chunks
    from ingest.worker_supervisor import (
        SupervisedWorker,
        restart_policy,
        to_stderr,
        worker_command,
    )

    supervisor = SupervisedWorker(
        worker_command(celery_args), policy=restart_policy(restart), own_session=True,
        before_restart=put_back_held_chunks(get_settings().redis.url, to_stderr),
    )  # fmt: skip
    for stop_signal in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop_signal, lambda _signum, _frame: supervisor.request_stop())
    code = supervisor.start().wait()
    raise SystemExit(code if code >= 0 else 128 - code)  # a shell's status for a signal
