"""A graph for an index kgqr did not build, from what its team has, keyed by the index's
own `_id`s: a relations file (`relations:FILE`), the keyword fields of its documents
(`IndexFieldsSource`, `kgqr kb graph --from-fields`), or what an LLM reads in chosen text
fields (`IndexTextSource`, `--extract FIELD`). Where the team names documents by a field
of its own (`--id-field`), relations and references are translated to `_id`s as they are
read (ingest/document_keys.py). Ingest tasks write their records into Neo4j
(and extracted triples into kgqr's own triples index): nothing into the team's index.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ingest.document_keys import DocumentKeys, keyed
from ingest.index_shards import every_document, highest_seq_nos
from ingest.records import EmbedFrom, ExtractFrom, Link, Record, Rejected
from ingest.result_window import page_size
from ingest.sources.base import Source, json_lines
from kgqr_core.field_evidence import (
    FieldEvidence,
    digest,
    field_values,
    joined_text,
    source_paths,
)
from plugin.field_map import FieldMap, MappedField, index_mapping, mapped_fields, relation_name
from plugin.kb_meta import DocumentStructure

SCAN_PAGE = 1_000
# More than EmbeddingGemma's 2,048 tokens: the rest of a long document would only ride
# through the broker to be cut off by the embedder.
EMBEDDED_CHARS = 16_000


class IndexChanged(RuntimeError):
    """An attached index was written to while a job over it ran: read again, its documents
    come in another order, and chunks cut from it are not those their numbers named."""


class RelationsFileSource(Source):
    """JSONL lines `{"source": ID, "relation": R, "target": ID}` (a document to another)
    or `{"source": ID, "relation": R, "entity": NAME}` (a document to what it names);
    `type` is read as `relation` too, as kgqr's own relation records name it."""

    kind = "relations"
    reads_a_folder = False
    reads_a_file = True

    def __init__(
        self, path: Path, limit: int | None = None, keys: DocumentKeys | None = None
    ) -> None:
        super().__init__(path, limit)
        self.keys = keys  # the file names documents by these keys, not by `_id`

    def structure(self) -> DocumentStructure:
        return DocumentStructure()

    def fingerprint(self) -> str:
        """The file's, and the key field it names documents by: the same file read with
        another field is another job."""
        keyed_by = self.keys.field if self.keys is not None else "_id"
        return hashlib.sha1(f"{super().fingerprint()}|{keyed_by}".encode()).hexdigest()[:16]

    def records(self) -> Iterator[Record]:
        if self.keys is None:
            return self._links()
        return keyed(self._links(), self.keys, sources=True)

    def _links(self) -> Iterator[Record]:
        for line in json_lines(self.path, self.limit):
            if line.error is not None:
                yield line.rejected(self.path.name)
                continue
            data = line.value
            try:
                if not isinstance(data, dict):
                    raise ValueError("a line must be a JSON object")
                yield Link(
                    source=str(data["source"]),
                    type=str(data["relation"] if "relation" in data else data["type"]),
                    target=None if data.get("target") is None else str(data["target"]),
                    entity=None if data.get("entity") is None else str(data["entity"]),
                )
            except (ValidationError, ValueError, KeyError) as exc:
                yield line.rejected(self.path.name, f"{type(exc).__name__}: {exc}")


class IndexFieldsSource(Source):
    """Typed edges from an attached index's entity fields (`brand: Acme` -> BRAND -> the
    entity Acme, shared by every document with that brand) and reference fields (`cites:
    [ID]` -> CITES -> that document). Read in `_id` order, so a resumed job cuts the
    same chunks."""

    kind = "index-fields"

    def __init__(
        self,
        client: Any,
        fields: FieldMap,
        limit: int | None = None,
        mapping: dict[str, Any] | None = None,
    ) -> None:
        """`mapping`: the index's, where the caller has read it (else read when needed)."""
        self.client = client
        self.fields = fields
        self.limit = limit
        self.path = Path(fields.index)
        self._mapped: dict[str, MappedField] | None = (
            mapped_fields(mapping) if mapping is not None else None
        )
        self._fingerprint: str | None = None

    def structure(self) -> DocumentStructure:
        relations = [*self.fields.entity_fields, *self.fields.reference_fields]
        return DocumentStructure(relations=list(dict.fromkeys(map(self.relation, relations))))

    def relation(self, path: str) -> str:
        """The relation `path`'s edges get (plugin.field_map.relation_name), from the index's
        mapping, read once."""
        if self._mapped is None:  # as it is now (attach's refusals were attach's to make)
            answer = self.client.indices.get_mapping(index=self.fields.index)
            self._mapped = mapped_fields(index_mapping(answer))
        return relation_name(path, self._mapped)

    def files(self) -> list[Path]:
        return []

    def fingerprint(self) -> str:
        """The index's document count, each shard's last write, and the fields: an index
        the team has since written to is a new job (`kgqr kb sync` keeps up with changes).
        By count alone, an update (which moves its document to the end of its shard's
        order) let a resumed job skip a document shifted into a chunk done before. Read
        once per source: a stalled job's chunks re-sent by the same command stay its own
        (read again, each write the team made meanwhile started another whole job)."""
        if self._fingerprint is None:
            self._fingerprint = self._read_fingerprint()
        return self._fingerprint

    def check_unchanged(self) -> None:
        """Raise IndexChanged if the team wrote to the index since the job began: a re-send
        reads it again, and its order (a write moves its document to its shard's end)
        shifted documents into chunks done before, skipping them in silence."""
        if self._fingerprint is not None and self._read_fingerprint() != self._fingerprint:
            raise IndexChanged(
                f"[{self.fields.index}] was written to while this job ran, so its chunks "
                "cannot be sent again as cut: run the same command again for a new job "
                "(answers the LLM gave are cached)"
            )

    def _read_fingerprint(self) -> str:
        count = self.client.count(index=self.fields.index)["count"]
        written = sorted(highest_seq_nos(self.client, self.fields.index).items())
        fields = self.fields
        key = f"{fields.index}|{fields.entity_fields}|{fields.reference_fields}|{fields.id_field}"
        return hashlib.sha1(f"{key}|{count}|{written}|{self.limit}".encode()).hexdigest()[:16]

    def records(self) -> Iterator[Record]:
        return self.with_ids(self._links())

    def _links(self) -> Iterator[Record]:
        for read, hit in enumerate(self._hits()):
            if self.limit is not None and read >= self.limit:
                return
            yield from self.links_of(hit["_id"], hit.get("_source") or {})

    def with_ids(self, links: Iterator[Record]) -> Iterator[Record]:
        """`links` with reference targets turned from the id field's values into `_id`s,
        where the field map names one."""
        if self.fields.id_field is None:
            return links
        keys = DocumentKeys(self.client, self.fields.index, self.fields.id_field)
        return keyed(links, keys, sources=False)

    def links_of(self, doc_id: str, source: dict[str, Any]) -> Iterator[Record]:
        """One document's edges (a value no edge can hold is set aside, with its reason),
        each with the field value it was read from as its evidence."""
        for path in self.fields.entity_fields:
            for value in field_values(source, path):
                yield self._link(doc_id, path, value, to_entity=True)
        for path in self.fields.reference_fields:
            for value in field_values(source, path):
                yield self._link(doc_id, path, value, to_entity=False)

    def _link(self, doc_id: str, path: str, value: str, to_entity: bool) -> Record:
        relation = self.relation(path)
        evidence = FieldEvidence.of_value(doc_id, path, value).as_stored()
        entity, target = (value, None) if to_entity else (None, value)
        try:
            return Link(
                source=doc_id, type=relation, entity=entity, target=target, evidence=evidence
            )
        except ValidationError as exc:
            reason = f"{doc_id} {path}: {exc.errors()[0]['msg']}"
            return Rejected(reason=reason, raw=value[:4000], stage="fields")

    def _hits(self) -> Iterator[dict[str, Any]]:
        wanted = [*self.fields.entity_fields, *self.fields.reference_fields]
        return scan(self.client, self.fields.index, wanted)


def scan(client: Any, index: str, fields: list[str]) -> Iterator[dict[str, Any]]:
    """Every document's `fields`, in one order (ingest/index_shards.py): a resumed job cuts
    the same chunks."""
    return every_document(client, index, source_paths(fields), page_size(client, index, SCAN_PAGE))


def embed_from(doc_id: str, source: dict[str, Any], fields: list[str]) -> Record | None:
    """What kgqr embeds of a document (None: its fields hold no text), with the digest a
    caller's own fetch of those fields must match for the vector to count for them."""
    text = joined_text(source, fields)
    if not text.strip():
        return None
    try:  # the digest of all of it; of the text, what an embedder reads at most
        return EmbedFrom(id=doc_id, text=text[:EMBEDDED_CHARS], digest=digest(text))
    except ValidationError as exc:
        return Rejected(reason=f"{doc_id}: {exc.errors()[0]['msg']}", raw=text[:4000])


class IndexEmbedSource(IndexFieldsSource):
    """The chosen text fields of each document of an index without vectors, for kgqr's
    side index of vectors (`kgqr kb embed`)."""

    kind = "index-embed"

    def structure(self) -> DocumentStructure:
        return DocumentStructure()

    def fingerprint(self) -> str:
        key = f"{super().fingerprint()}|{self.fields.side_vector_fields}|{self.fields.vector_model}"
        return hashlib.sha1(key.encode()).hexdigest()[:16]

    def records(self) -> Iterator[Record]:
        wanted = self.fields.side_vector_fields
        for read, hit in enumerate(scan(self.client, self.fields.index, wanted)):
            if self.limit is not None and read >= self.limit:
                return
            record = embed_from(hit["_id"], hit.get("_source") or {}, wanted)
            if record is not None:
                yield record


class IndexTextSource(IndexFieldsSource):
    """The chosen text fields of each document, for the LLM to read triples from (two calls
    a document: hours for thousands on a CPU; answers are cached, a re-run resumes)."""

    kind = "index-extract"

    def __init__(self, client: Any, fields: FieldMap, text_fields: list[str],
                 limit: int | None = None) -> None:  # fmt: skip
        super().__init__(client, fields, limit)
        self.text_fields = text_fields

    def structure(self) -> DocumentStructure:
        return DocumentStructure()

    def fingerprint(self) -> str:
        return hashlib.sha1(f"{super().fingerprint()}|{self.text_fields}".encode()).hexdigest()[:16]

    def records(self) -> Iterator[Record]:
        title = self.fields.title_field
        wanted = [*self.text_fields, *([title] if title else [])]
        for read, hit in enumerate(scan(self.client, self.fields.index, wanted)):
            if self.limit is not None and read >= self.limit:
                return
            source = hit.get("_source") or {}
            text = joined_text(source, self.text_fields)
            if not text.strip():
                continue  # nothing to read (or the fields are empty for this document)
            heading = " ".join(field_values(source, title))[:1024] if title else ""
            # The LLM reads the title too: its triples need a caller to see both.
            evidence = FieldEvidence.of_text(hit["_id"], wanted, source).as_stored()
            try:
                yield ExtractFrom(id=hit["_id"], title=heading, text=text, evidence=evidence)
            except ValidationError as exc:
                yield Rejected(reason=f"{hit['_id']}: {exc.errors()[0]['msg']}", raw=text[:4000])
