"""Keeping an attached index's graph up with what its team's app writes.

Changes are found by sequence number: every write to a shard (an add, an update) gets the
next `_seq_no`, so the documents of shard S written since the last sync are those with
`_seq_no` above its checkpoint. A sync reads each shard once, from its checkpoint up to
the highest number it sees at the start, and sends each document read as one Refresh
record: the ingest task that takes it removes the document's old field edges and writes
what its fields name now, in one step (ingest/chunk_ingest.py). Only then do the
checkpoints move.

Deletions leave no sequence number to search for, so a sync also asks the index which of
the graph's document nodes still exist (an `ids` query per 10,000 nodes) and removes the
others with every edge they had. Between a deletion and the next sync no search can use a
deleted document's edges either: every graph candidate is checked against the index, as
the caller, before it is boosted or shown (strategies/vector_lookups.py).

Each sync reads OVERLAP writes per shard before its checkpoint again: a write numbered
before the checkpoint but made searchable only after the last sync read it (a refresh
racing the sync) is caught then. Refreshing a document twice leaves the same edges, so an
interrupted sync, run again, rewrites them all.

Limits: checkpoints are per index name and shard, with the index's uuid. An index deleted
and re-created under the same name (or restored from a snapshot) has another uuid and is
read again from its start; where the account may not read the uuid, when a shard's highest
number is below its checkpoint (as a shard whose last documents were deleted is, at the
cost of a read), and one that took more writes than before by the next sync needs
`kgqr kb sync --full`. A write made visible more than OVERLAP writes late is
missed until then; edges from a relations file
or LLM extraction are those sources' and change only when they are loaded again. An
alias is read through its filter, and must name one index.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ingest.index_shards import counts_between, shard_documents
from ingest.records import Link, Record, Refresh
from ingest.result_window import page_size
from ingest.sources.attached_graph import IndexChanged, IndexFieldsSource, embed_from
from ingest.sources.base import Source
from kgqr_core.field_evidence import source_paths
from plugin import schema
from plugin.field_map import FieldMap
from plugin.kb_meta import DocumentStructure

PAGE = 1_000
EXISTENCE_BATCH = 10_000
# Writes a shard numbered before the checkpoint but made searchable after it (a refresh
# racing the last sync) are read again: re-deriving a document's edges is idempotent.
OVERLAP = 1_000

Checkpoints = dict[str, int]  # "index/shard" -> the highest _seq_no synced


def with_overlap(checkpoints: Checkpoints) -> Checkpoints:
    """The checkpoints moved back by OVERLAP writes per shard."""
    return {key: max(-1, seq_no - OVERLAP) for key, seq_no in checkpoints.items()}


def read_from(
    synced: Checkpoints, now: Checkpoints, made_again: bool = False
) -> tuple[Checkpoints, list[str]]:
    """Where a sync reads each shard from, and the shards read again from their start.
    An index made again under its name (deleted and created, a snapshot restored) numbers
    its writes from 0, and reading on from the old checkpoint missed every document up to
    it, silently. `made_again`: its uuid says so, and every shard is read from its start.
    Where the uuid cannot be read, a shard's numbers, which only grow in an index's life,
    tell it when its highest (among the documents it holds) is now below its checkpoint;
    or its last documents were deleted, and reading it again costs a read and loses
    nothing. An index made again with more writes than the checkpoint is told by the uuid
    alone."""
    if made_again:
        return {}, sorted(now)
    restarted = sorted(key for key, highest in now.items() if highest < synced.get(key, -1))
    since = with_overlap({k: v for k, v in synced.items() if k not in restarted})
    return since, restarted


class ChangedDocumentsSource(Source):
    """The documents written between two checkpoints, each a Refresh of its field edges
    (and a Rejected for each value no edge can hold), and, where kgqr keeps vectors of the
    index, its text to embed again."""

    kind = "index-changes"

    def __init__(self, client: Any, fields: FieldMap, since: Checkpoints, until: Checkpoints):
        self.client, self.fields, self.since, self.until = client, fields, since, until
        self.path = Path(fields.index)
        self.limit = None
        self._counted: dict[str, int] | None = None

    def structure(self) -> DocumentStructure:
        return IndexFieldsSource(self.client, self.fields).structure()

    def files(self) -> list[Path]:
        return []

    def fingerprint(self) -> str:
        key = json.dumps([self.fields.index, self.since, self.until], sort_keys=True)
        return hashlib.sha1(key.encode()).hexdigest()[:16]

    def check_unchanged(self) -> None:
        """An update in the range moves its document past `until`, out of it, and those
        after it one place earlier, into chunks done before: a re-send skipped them, and a
        checkpoint moved past them left them for a `--full` sync. Told by the range's
        count per shard, which only an update or a delete in it lowers: a new document,
        the common write to a live index, leaves the chunks as cut."""
        if self._counted is None:  # not read yet: nothing was cut
            return
        if counts_between(self.client, self.fields.index, self.since, self.until) != self._counted:
            raise IndexChanged(
                f"[{self.fields.index}] was written to while this sync ran, so its chunks "
                "cannot be sent again as cut: run the sync again (its checkpoints did not "
                "move, so it reads every change)"
            )

    def records(self) -> Iterator[Record]:
        if self._counted is None:  # the range as the job's chunks are cut from it
            self._counted = counts_between(self.client, self.fields.index, self.since, self.until)
        edges = IndexFieldsSource(self.client, self.fields)
        return edges.with_ids(self._refreshes(edges))

    def _refreshes(self, edges: IndexFieldsSource) -> Iterator[Record]:
        relations = edges.structure().relations
        embedded = self.fields.side_vector_fields
        for doc_id, source in self.documents():
            read = list(edges.links_of(doc_id, source))
            yield from (record for record in read if not isinstance(record, Link))
            links = [record for record in read if isinstance(record, Link)]
            yield Refresh(id=doc_id, relations=relations, links=links)
            if embedded and (text := embed_from(doc_id, source, embedded)) is not None:
                yield text

    def documents(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(id, fields) of each document written in the range, shard by shard."""
        fields = self.fields
        wanted = [*fields.entity_fields, *fields.reference_fields, *fields.side_vector_fields]
        page = page_size(self.client, fields.index, PAGE)
        for key, until in sorted(self.until.items()):
            _, _, shard = key.rpartition("/")
            for hit in shard_documents(
                self.client, fields.index, int(shard), source_paths(wanted) or False, page,
                after=self.since.get(key, -1), until=until,
            ):  # fmt: skip
                yield hit["_id"], hit.get("_source") or {}


DOCUMENT_NODES = """
MATCH (n:Node {kb: $kb}) WHERE n.type = 'document' AND n.id > $after
RETURN n.id AS id ORDER BY n.id LIMIT $batch
"""


def deleted_documents(client: Any, neo4j: Any, kb: str, index: str) -> list[str]:
    """The graph's document nodes the index no longer holds."""
    gone: list[str] = []
    after = ""
    batch = page_size(client, index, EXISTENCE_BATCH)
    while True:
        records, _, _ = neo4j.execute_query(DOCUMENT_NODES, kb=kb, after=after,
                                            batch=batch)  # fmt: skip
        ids = [str(record["id"]) for record in records]
        if not ids:
            return gone
        body = {"size": len(ids), "_source": False, "query": {"ids": {"values": ids}}}
        found = {hit["_id"] for hit in client.search(index=index, body=body)["hits"]["hits"]}
        gone.extend(doc for doc in ids if doc not in found)
        after = ids[-1]


def remove_side_vectors(client: Any, kb: str, ids: list[str]) -> None:
    """kgqr's vectors of deleted documents (none kept where it keeps none)."""
    index = schema.vectors_index(kb)
    if not ids or not client.indices.exists(index=index):
        return
    for start in range(0, len(ids), EXISTENCE_BATCH):
        batch = ids[start : start + EXISTENCE_BATCH]
        client.delete_by_query(index=index, body={"query": {"ids": {"values": batch}}},
                               params={"refresh": "true"})  # fmt: skip


def remove_documents(neo4j: Any, kb: str, ids: list[str]) -> None:
    """Delete documents' nodes and every edge they had."""
    for start in range(0, len(ids), EXISTENCE_BATCH):
        neo4j.execute_query(
            "MATCH (n:Node {kb: $kb}) WHERE n.id IN $ids DETACH DELETE n",
            kb=kb, ids=ids[start : start + EXISTENCE_BATCH],
        )  # fmt: skip
