"""Bulk upserts into OpenSearch. Ids are the records' own, so a re-run overwrites."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ingest.bulk_requests import bulk_results
from ingest.records import CorpusTriple, Document, EmbedFrom
from kgqr_core import packed_vectors
from plugin import schema


@dataclass(frozen=True)
class WriteFailure:
    record: dict[str, Any]
    reason: str
    stage: str
    key: str | None = None  # the id the record would have had in its index
    status: int = 0  # the engine's status for the record, when it answered one


def _bulk(
    client: Any, index: str, items: Sequence[tuple[str, dict[str, Any], Any]], stage: str
) -> list[WriteFailure]:
    """Index (id, source, record) items; per-item errors (a record too large to send
    among them) become failures."""
    operations = [
        ({"index": {"_index": index, "_id": doc_id}}, source) for doc_id, source, _ in items
    ]
    failures = []
    for (doc_id, _source, record), item in zip(
        items, bulk_results(client, operations), strict=True
    ):
        error = item.get("error")
        status = item.get("status", 0)
        if error is not None:
            if status in (429, 503):
                raise TransientBulkError(f"bulk item rejected with {status}: {error}")
            if error.get("type") == "cluster_block_exception":
                # The index, not the record: read-only (a full disk's flood stage, or
                # an operator). Retried until lifted; never set aside as a bad record.
                raise TransientBulkError(f"{index} is blocked: {error.get('reason')}")
            reason = f"{error.get('type')}: {error.get('reason')}"
            failures.append(WriteFailure(record.model_dump(), reason, stage, doc_id, status))
    return failures


class TransientBulkError(RuntimeError):
    """OpenSearch pushed back (429/503); the whole chunk is retried with backoff."""


def the_engines_trouble(status: int) -> bool:
    """Whether a bulk item's status is the engine's state (pushed back, or failed on its
    side), not its record's: retried, where a plain error failed the chunk for good."""
    return status == 429 or status >= 500


def write_documents(
    client: Any, kb: str, documents: Sequence[Document], vectors: np.ndarray
) -> list[WriteFailure]:
    items = [
        (doc.id, {
            "id": doc.id, "kb": kb, "type": doc.type, "title": doc.title, "body": doc.body(),
            "text": doc.combined_text(), "fields": doc.fields, "vector": vector.tolist(),
            # What vector-store clients read as a hit's metadata (LlamaIndex needs it).
            "metadata": {"kb": kb, "type": doc.type, "title": doc.title},
        }, doc)
        for doc, vector in zip(documents, vectors, strict=True)
    ]  # fmt: skip
    return _bulk(client, schema.documents_index(kb), items, "opensearch-documents")


def write_triples(
    client: Any, kb: str, triples: Sequence[CorpusTriple], vectors: np.ndarray
) -> list[WriteFailure]:
    items = [
        (t.triple_id, {
            "id": t.triple_id, "kb": kb, "head": t.head, "relation": t.relation, "tail": t.tail,
            "passage_id": t.passage_id, "ttr": t.ttr, "ttr_source": t.ttr_source,
            "vector": vector.tolist(),
            **({"field_evidence": t.evidence} if t.evidence else {}),
        }, t)
        for t, vector in zip(triples, vectors, strict=True)
    ]  # fmt: skip
    return _bulk(client, schema.triples_index(kb), items, "opensearch-triples")


def write_side_vectors(
    client: Any, kb: str, documents: Sequence[EmbedFrom], vectors: np.ndarray, model: str
) -> list[WriteFailure]:
    """Each with the model that made it: a chunk of an earlier `kgqr kb embed --model`
    still queued when the model changed must not pass for the new model's."""
    items = [
        (d.id, {"vector": packed_vectors.pack(vector), "digest": d.digest, "model": model}, d)
        for d, vector in zip(documents, vectors, strict=True)
    ]
    return _bulk(client, schema.vectors_index(kb), items, "opensearch-vectors")


# What a dead letter keeps of a record: enough to find and fix it. A record set aside for
# being too large would be refused again, whole, by the dead-letter index.
DEAD_LETTER_MAX_CHARS = 64 * 1024


def _kept(text: str) -> str:
    if len(text) <= DEAD_LETTER_MAX_CHARS:
        return text
    return (
        f"{text[:DEAD_LETTER_MAX_CHARS]}... [{len(text) - DEAD_LETTER_MAX_CHARS} more characters]"
    )


def _kept_record(record: dict[str, Any]) -> dict[str, Any]:
    """The record, or its start and identity when it is too large to keep whole."""
    text = json.dumps(record, ensure_ascii=False, default=str)
    if len(text) <= DEAD_LETTER_MAX_CHARS:
        return record
    kept: dict[str, Any] = {key: record[key] for key in ("kind", "id", "type") if key in record}
    kept["truncated"] = _kept(text)
    return kept


class DeadLetterWriteError(RuntimeError):
    """Rejected records could not be set aside: the chunk must fail (and be retried by a
    re-run), since completing it would lose them silently."""


def write_dead_letters(
    client: Any, kb: str, job_id: str, chunk: int, failures: Sequence[WriteFailure]
) -> None:
    """Set failures aside where a user can inspect them; ids make a re-run overwrite.
    Raises when any of them did not land (transiently: the chunk is retried)."""
    if not failures:
        return
    now = dt.datetime.now(dt.UTC).isoformat()
    operations = []
    for position, failure in enumerate(failures):
        doc_id = f"{job_id}-{chunk}-{position}"
        raw = failure.record.get("raw") if failure.record.get("kind") == "rejected" else None
        letter = {
            "kb": kb,
            "job_id": job_id,
            "chunk": chunk,
            "stage": failure.stage,
            "reason": failure.reason,
            "raw": None if raw is None else _kept(str(raw)),
            "record": _kept_record(failure.record),
            "timestamp": now,
        }
        operations.append(
            ({"index": {"_index": schema.deadletter_index(kb), "_id": doc_id}}, letter)
        )
    errors = [item for item in bulk_results(client, operations) if item.get("error")]
    if not errors:
        return
    if any(the_engines_trouble(error.get("status", 0)) for error in errors):
        raise TransientBulkError(f"dead letters rejected: {errors[0]['error']}")
    first = errors[0]["error"]
    raise DeadLetterWriteError(
        f"{len(errors)} of {len(failures)} rejected records could not be set aside in "
        f"{schema.deadletter_index(kb)}: {first.get('type')}: {first.get('reason')}"
    )
