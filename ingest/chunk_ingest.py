"""Ingesting one chunk of records: validate, embed, write both stores, set failures aside.

A record that fails validation or indexing goes to the knowledge base's dead-letter index
with its reason; the rest of the chunk lands. Everything is an upsert, so processing the
same chunk twice (a retry, a re-delivery after a worker died) changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ingest import graph_projection, graph_writer, opensearch_writer
from ingest.opensearch_writer import WriteFailure
from ingest.records import (
    RECORD_ADAPTER,
    CorpusTriple,
    Document,
    EmbedFrom,
    ExtractFrom,
    Link,
    Mention,
    Refresh,
    Rejected,
    Relation,
    set_aside_if_unstorable,
)
from ingest.triple_extraction import extract
from ingest.worker_resources import WorkerResources
from kgqr_core import graph_version
from kgqr_core.ids import entity_id
from plugin import installer

log = logging.getLogger("kgqr.ingest")


@dataclass
class ChunkOutcome:
    skipped: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    llm_calls: int = 0
    cached_llm_calls: int = 0


@dataclass
class _Sorted:
    documents: list[Document] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    refreshes: list[Refresh] = field(default_factory=list)
    to_embed: list[EmbedFrom] = field(default_factory=list)
    to_extract: list[ExtractFrom] = field(default_factory=list)
    mentions: list[Mention] = field(default_factory=list)
    triples: list[CorpusTriple] = field(default_factory=list)
    failures: list[WriteFailure] = field(default_factory=list)

    def graph_nodes(self) -> set[str]:
        """Every node the chunk may write or give an edge: the ones whose documents in the
        graph's search-time copy change (one that did not land is re-read as absent)."""
        nodes = {doc.id for doc in self.documents} | {r.id for r in self.to_extract}
        nodes |= {refresh.id for refresh in self.refreshes}
        for relation in self.relations:
            nodes |= {relation.source, relation.target}
        for link in self.links:
            nodes |= {link.source, link.target or entity_id(link.entity or "")}
        for mention in self.mentions:
            nodes |= {mention.passage_id, entity_id(mention.entity)}
        for triple in self.triples:
            nodes |= {entity_id(triple.head), entity_id(triple.tail), triple.passage_id}
        return nodes


def _sort(records: list[dict[str, Any]]) -> _Sorted:
    sorted_ = _Sorted()
    for raw in records:
        try:
            # Chunks cut here were checked for unstorable values already; a message from
            # elsewhere may not have been.
            record = set_aside_if_unstorable(raw) or RECORD_ADAPTER.validate_python(raw)
        except ValidationError as exc:
            reason = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            sorted_.failures.append(WriteFailure(raw, reason, "validate"))
            continue
        if isinstance(record, Rejected):
            sorted_.failures.append(WriteFailure(record.model_dump(), record.reason, record.stage))
        elif isinstance(record, Document):
            sorted_.documents.append(record)
        elif isinstance(record, Relation):
            sorted_.relations.append(record)
        elif isinstance(record, Link):
            sorted_.links.append(record)
        elif isinstance(record, Refresh):
            sorted_.refreshes.append(record)
        elif isinstance(record, EmbedFrom):
            sorted_.to_embed.append(record)
        elif isinstance(record, ExtractFrom):
            sorted_.to_extract.append(record)
        elif isinstance(record, Mention):
            sorted_.mentions.append(record)
        else:
            sorted_.triples.append(record)
    return sorted_


def ingest_chunk(
    resources: WorkerResources,
    job_id: str,
    kb: str,
    chunk: int,
    records: list[dict[str, Any]],
    extract_triples: bool = False,
) -> ChunkOutcome:
    """Write one chunk's records. A record the engine failed to write on its side raises
    TransientBulkError, for the chunk to be retried, and once retries are spent the chunk
    fails rather than being done: set aside, it was not the record's fault, and its chunk,
    done, was never sent again by a re-run of the same source (only `--restart` wrote it)."""
    if resources.jobs.is_done(job_id, chunk):
        return ChunkOutcome(skipped=True)
    outcome = ChunkOutcome()
    batch = _sort(records)
    batch.documents = _last_of_each_id(batch.documents, outcome.problems)

    own = batch.documents if extract_triples else []
    passages = [
        *((document, None) for document in own),
        *((record.as_passage(), record.evidence) for record in batch.to_extract),
    ]
    # An attached index's documents are graph nodes only (they stay in the team's index).
    graph_writer.write_document_nodes(resources.neo4j, kb, [r.id for r in batch.to_extract])
    for document, evidence in passages:
        if not resources.jobs.exists(job_id):
            # Dropped while an LLM reads the chunk's passages, which can take minutes: the
            # drop waits on this chunk (ingest.write_leases), so it stops unwritten.
            return ChunkOutcome(skipped=True)
        extraction = extract(resources.llm, document)
        # What is read from an attached index's fields is usable only where they show.
        read_from = {"evidence": evidence}
        batch.triples.extend(t.model_copy(update=read_from) for t in extraction.triples)
        batch.mentions.extend(m.model_copy(update=read_from) for m in extraction.mentions)
        outcome.problems.extend(extraction.problems)
        outcome.llm_calls += extraction.llm_calls
        outcome.cached_llm_calls += extraction.cached_calls

    # Read before they are written: documents whose node another type (or none) named, and
    # the nodes that lose an edge as refreshed documents' field edges go.
    retyped = set(graph_projection.retyped(
        resources.neo4j, kb, [(document.id, document.type) for document in batch.documents]
    ))  # fmt: skip
    refreshed, relations = _field_edges_refreshed(batch)
    losing = (
        graph_projection.neighbours_of(resources.neo4j, kb, refreshed) | set(refreshed)
        if relations
        else set()
    )
    retyped, losing = resources.jobs.copies_to_redo(job_id, chunk, retyped, losing)
    documents_ok = _write_documents(resources, kb, batch)
    vectors_ok = _write_side_vectors(resources, kb, batch)
    if relations:
        graph_writer.remove_field_edges(resources.neo4j, kb, relations, refreshed)
    graph_writer.write_relations(resources.neo4j, kb, batch.relations)
    graph_writer.write_links(resources.neo4j, kb, batch.links)
    graph_writer.write_mentions(resources.neo4j, kb, batch.mentions)
    triples_ok = _write_triples(resources, kb, batch)
    if documents_ok or batch.relations or batch.links or batch.mentions or triples_ok or losing:
        # The copy first: a search that sees the new version reads the new edges. A
        # retyped document's neighbours name it with its type in their edges.
        touched = batch.graph_nodes() | losing
        touched |= graph_projection.neighbours_of(resources.neo4j, kb, retyped)
        graph_projection.project_nodes(resources.neo4j, resources.opensearch, kb, touched)
        graph_version.bump(resources.redis, kb)

    # Raised once the records that landed are in both stores and their copies: raised
    # before, a retry's reads of the graph (retyped, losing) saw it changed already, and
    # some nodes' copies were never made again.
    engines = [failure for failure in batch.failures if failure.status >= 500]
    if engines:
        keys = ", ".join(str(failure.key) for failure in engines[:5])
        raise opensearch_writer.TransientBulkError(
            f"the engine failed to write {len(engines)} records ({keys}): {engines[0].reason}"
        )
    opensearch_writer.write_dead_letters(resources.opensearch, kb, job_id, chunk, batch.failures)
    outcome.counts = {
        # Written, read again (sync), or read for triples (an attached index's, a node)
        "documents": documents_ok + len(batch.refreshes) + len(batch.to_extract),
        "relations": len(batch.relations) + len(batch.links),
        "mentions": len(batch.mentions),
        "triples": triples_ok,
        "rejected": len(batch.failures),
        "vectors": vectors_ok,
    }
    outcome.problems.extend(f"{f.stage}: {f.reason}" for f in batch.failures)
    resources.jobs.complete_chunk(job_id, chunk, outcome.counts)
    return outcome


def _last_of_each_id(documents: list[Document], problems: list[str]) -> list[Document]:
    """The last document given for each id, as the documents index keeps it: both were
    counted, and the graph could type the node as the first."""
    last = {document.id: document for document in documents}
    if len(last) < len(documents):
        repeated = sorted({d.id for d in documents if last[d.id] is not d})
        problem = f"documents given more than once in one chunk, the last kept: {repeated[:10]}"
        log.warning(problem, extra={"kgqr": {"repeated": len(repeated)}})
        problems.append(problem)
    return list(last.values())


def _field_edges_refreshed(batch: _Sorted) -> tuple[list[str], list[str]]:
    """The refreshed documents whose old field edges go, and those edges' names (none: a
    sync for vectors only); their new edges join the chunk's links."""
    batch.links.extend(link for refresh in batch.refreshes for link in refresh.links)
    relations = sorted({name for refresh in batch.refreshes for name in refresh.relations})
    return [refresh.id for refresh in batch.refreshes], relations


def _write_documents(resources: WorkerResources, kb: str, batch: _Sorted) -> int:
    return _index_then_graph(
        resources, kb, batch, batch.documents,
        embedded=lambda doc: (doc.title, doc.body()), key=lambda doc: doc.id,
        index_write=opensearch_writer.write_documents, graph_write=graph_writer.write_documents,
    )  # fmt: skip


def _write_side_vectors(resources: WorkerResources, kb: str, batch: _Sorted) -> int:
    """kgqr's vectors of an attached index's documents, into its own side index (the
    documents' nodes exist already, or come with their edges)."""

    def write(client: Any, kb: str, documents: Any, vectors: Any) -> list[WriteFailure]:
        model = resources.settings.embedder.model
        return opensearch_writer.write_side_vectors(client, kb, documents, vectors, model)

    return _index_then_graph(
        resources, kb, batch, batch.to_embed,
        embedded=lambda document: ("", document.text), key=lambda document: document.id,
        index_write=write, graph_write=lambda *_: None,
    )  # fmt: skip


def _write_triples(resources: WorkerResources, kb: str, batch: _Sorted) -> int:
    if batch.triples:
        installer.ensure_triples_index(resources.opensearch, kb, resources.dimension)
    for triple in batch.triples:
        if triple.ttr is None:
            triple.ttr, triple.ttr_source = triple.template_ttr(), "template"
    return _index_then_graph(
        resources, kb, batch, batch.triples,
        embedded=lambda triple: ("", triple.ttr or ""), key=lambda triple: triple.triple_id,
        index_write=opensearch_writer.write_triples, graph_write=graph_writer.write_triples,
    )  # fmt: skip


def _index_then_graph(
    resources: WorkerResources,
    kb: str,
    batch: _Sorted,
    records: Sequence[Any],
    *,
    embedded: Callable[[Any], tuple[str, str]],
    key: Callable[[Any], str],
    index_write: Callable[..., list[WriteFailure]],
    graph_write: Callable[..., None],
) -> int:
    """Embed (`embedded`: a record's title and text) and index records, then write to the
    graph only those that were indexed, so the two stores agree; failures join the chunk's
    dead letters."""
    if not records:
        return 0
    titles, texts = zip(*(embedded(record) for record in records), strict=True)
    vectors = resources.embedder.encode(texts, titles)
    failures = index_write(resources.opensearch, kb, records, vectors)
    failed_keys = {failure.key for failure in failures}
    landed = [record for record in records if key(record) not in failed_keys]
    graph_write(resources.neo4j, kb, landed)
    batch.failures.extend(failures)
    return len(landed)
