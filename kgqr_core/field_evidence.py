"""What an edge read from a document's fields asks of a caller before they may use it.

An attached index's graph is built by kgqr's ingest account, which sees every field; a
caller may be kept from some (field-level security hides them, masking hashes them), or
the document may have changed since. So an edge read from fields (`brand: Acme`, or the
triples an LLM read in `body`) carries the document, the fields and a digest of the
values it was read from, and is usable only by a caller whose own fetch of that document
shows those values: ingest (attached_graph.py) and the read path (vector_lookups.py)
both derive the digest here, so they agree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple


def field_items(source: dict[str, Any], path: str) -> list[Any]:
    """A document's values of a (dotted) field as its JSON holds them, as the engine reads
    them: one for a scalar, each of a list's, each of a list of objects' (`authors.name`),
    a key that holds dots (`"meta.category"`), and a multi-field's parent's value
    (`brand.keyword` indexes `brand`); none when absent or blank."""
    items = _values_at(source, path.split("."))
    return [item for item in items if item is not None and str(item).strip()]


def _values_at(value: Any, parts: list[str]) -> list[Any]:
    if isinstance(value, list):
        return [found for item in value for found in _values_at(item, parts)]
    if not parts or not isinstance(value, dict):
        return [value] if value is not None else []  # a scalar's multi-field reads it
    for cut in range(len(parts), 0, -1):  # the longest key first: "meta.category"
        key = ".".join(parts[:cut])
        if key in value:
            return _values_at(value[key], parts[cut:])
    return []


def source_paths(paths: Iterable[str]) -> list[str]:
    """What to ask of `_source` for `paths`' values: each path and the fields it lies
    under, since `_source: ["brand.keyword"]` returns nothing of a multi-field's value."""
    return sorted({".".join(parts[:cut]) for path in paths
                   for parts in [path.split(".")] for cut in range(1, len(parts) + 1)})  # fmt: skip


def field_values(source: dict[str, Any], path: str) -> list[str]:
    """field_items, as strings."""
    return [str(item) for item in field_items(source, path)]


def joined_text(source: dict[str, Any], fields: Iterable[str]) -> str:
    """The fields' values one per line, in the order given: what an LLM reads of them."""
    return "\n".join(value for path in fields for value in field_values(source, path))


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class FieldEvidence(NamedTuple):
    """The document an edge was read from, a digest of what was read, and from which of
    its fields. A distinct type, not a string: no document id can pass for one."""

    document: str
    digest: str
    fields: tuple[str, ...]

    @classmethod
    def of_value(cls, document: str, field: str, value: str) -> FieldEvidence:
        """An edge one value of one field names (an entity or a referenced document)."""
        return cls(document, digest(value), (field,))

    @classmethod
    def of_text(cls, document: str, fields: Sequence[str], source: dict[str, Any]) -> FieldEvidence:
        """Edges read from the fields' text together (an LLM's triples)."""
        return cls(document, digest(joined_text(source, fields)), tuple(fields))

    @classmethod
    def stored(cls, value: Sequence[str]) -> FieldEvidence:
        """From its stored form (an edge property, a triple's field): [document, digest,
        field, ...]."""
        document, text_digest, *fields = value
        return cls(document, text_digest, tuple(fields))

    def as_stored(self) -> list[str]:
        return [self.document, self.digest, *self.fields]

    def shown_in(self, source: dict[str, Any] | None) -> bool:
        """Whether a fetch of the document that returned `source` (None: it returned no
        document) shows what the edge was read from: one of the values (a multi-valued
        field names an entity per value), or the fields' text as a whole."""
        if source is None:
            return False
        shown = {digest(value) for path in self.fields for value in field_values(source, path)}
        return self.digest in shown or self.digest == digest(joined_text(source, self.fields))


Evidence = str | FieldEvidence
"""What a caller must be able to read to use an edge: a document by id, or what a
document's fields show."""


def evidence_of(stored: str | Sequence[str] | None) -> Evidence | None:
    """An edge's evidence as Neo4j or a triples index returns it: a passage id, the stored
    form of a FieldEvidence, or nothing."""
    if stored is None or isinstance(stored, str):
        return stored
    return FieldEvidence.stored(stored)
