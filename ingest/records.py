"""What a knowledge base is made of, as it crosses from loaders into ingest tasks.

Loaders yield these records; tasks receive them as JSON in Celery messages and validate
them again there, because a message is the boundary where a bad record is set aside.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    field_validator,
    model_validator,
)

from plugin.schema import has_name_characters

NonEmpty = Annotated[str, Field(min_length=1, max_length=512)]


def _nameable(value: str) -> str:
    if not has_name_characters(value):
        raise ValueError(f"{value!r} has no letters or digits to name a graph type with")
    return value


# A document type or relation name, which becomes a Neo4j label or relationship type.
GraphName = Annotated[NonEmpty, AfterValidator(_nameable)]

OPENSEARCH_ID_MAX_BYTES = 512
TITLE_MAX_CHARS = 1024


def _fits_an_index_id(value: str) -> str:
    if len(value.encode()) > OPENSEARCH_ID_MAX_BYTES:
        raise ValueError(
            f"is {len(value.encode())} bytes in UTF-8; OpenSearch ids hold at most "
            f"{OPENSEARCH_ID_MAX_BYTES}"
        )
    return value


def _short_enough_to_name(value: str) -> str:
    """A title names its graph node, and Neo4j cannot index a name much over 8 KB: one
    20,000-character title failed its whole chunk's graph write."""
    if len(value) > TITLE_MAX_CHARS:
        raise ValueError(
            f"is {len(value)} characters; a title names a graph node and may have at most "
            f"{TITLE_MAX_CHARS} (put long text in `text` or `fields`)"
        )
    return value


# The id of a document (or of the document a relation, triple or mention points at).
DocumentId = Annotated[NonEmpty, AfterValidator(_fits_an_index_id)]
Title = Annotated[str, AfterValidator(_short_enough_to_name)]


class Document(BaseModel):
    """A node with text: id, type, named fields, and the text rendered from them."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["document"] = "document"
    id: DocumentId
    type: GraphName
    title: Title = ""
    fields: dict[str, Any] = Field(default_factory=dict)
    text: str | None = None

    @field_validator("fields")
    @classmethod
    def _fields_are_json(cls, value: dict[str, Any]) -> dict[str, Any]:
        json.dumps(value)  # raises for values no index can store
        return value

    def body(self) -> str:
        """The text to index: given, else rendered as ``field: value`` lines (KAR's layout)."""
        if self.text is not None:
            return self.text
        return "\n".join(f"{key}: {_flatten(value)}" for key, value in self.fields.items())

    def combined_text(self) -> str:
        return f"{self.title}\n{self.body()}".strip()


class Relation(BaseModel):
    """A typed edge between two documents of the same knowledge base."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["relation"] = "relation"
    source: DocumentId
    type: GraphName
    target: DocumentId
    properties: dict[str, str | int | float | bool] = Field(default_factory=dict)

    @field_validator("properties")
    @classmethod
    def _neo4j_names_them(cls, value: dict[str, Any]) -> dict[str, Any]:
        """Neo4j refuses an empty property name or one holding NUL, and failed the whole
        chunk's graph write, after its documents had landed."""
        for name in value:
            if not name.strip() or "\x00" in name:
                raise ValueError(f"{name!r} cannot name a Neo4j property")
        return value


class Link(BaseModel):
    """A typed edge of an attached index's graph, keyed by the index's own `_id`s: from a
    document to another document (`target`) or to the entity a value names (`entity`)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["link"] = "link"
    source: DocumentId
    type: GraphName
    target: DocumentId | None = None
    entity: NonEmpty | None = None
    # Stored FieldEvidence ([document, digest, field]) for an edge read from a field; None
    # for a relations file's, which any reader of the source document may use.
    evidence: list[str] | None = None

    @model_validator(mode="after")
    def _one_end(self) -> Link:
        if (self.target is None) == (self.entity is None):
            raise ValueError("a link needs exactly one of `target` (a document id) or `entity`")
        return self


class Refresh(BaseModel):
    """An attached document its team changed (`kgqr kb sync`): the edges read from its
    entity and reference fields (`relations`) are replaced by `links`, what its fields name
    now. One record, so a document's old edges never go after its new ones land in
    another chunk, and a chunk run twice leaves the same edges."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["refresh"] = "refresh"
    id: DocumentId
    relations: list[GraphName]
    links: list[Link] = Field(default_factory=list)


class EmbedFrom(BaseModel):
    """An attached document's text, for kgqr's side index of vectors (`kgqr kb embed`):
    `digest` is what a caller's own fetch of the fields must show for the vector to count
    in their search (kgqr_core/field_evidence.py)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["embed"] = "embed"
    id: DocumentId
    text: str
    digest: str


class ExtractFrom(BaseModel):
    """An attached index's document whose chosen text fields the LLM reads for triples
    (KG-CQR's construction); only its graph is written, never the document."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["extract"] = "extract"
    id: DocumentId
    title: Title = ""
    text: str
    # Stored FieldEvidence of the fields read: what the triples read from them need a
    # caller to see.
    evidence: list[str] | None = None

    def as_passage(self) -> Document:
        return Document(id=self.id, type="document", title=self.title, text=self.text)


class CorpusTriple(BaseModel):
    """A (head, relation, tail) fact extracted from one passage (KG-CQR's corpus KG)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["triple"] = "triple"
    head: NonEmpty
    relation: NonEmpty
    tail: NonEmpty
    passage_id: DocumentId
    ttr: str | None = None
    ttr_source: Literal["llm", "template", "given"] | None = None
    evidence: list[str] | None = None  # ExtractFrom.evidence, for a triple read from fields

    @property
    def triple_id(self) -> str:
        key = json.dumps([self.passage_id, self.head, self.relation, self.tail])
        return hashlib.sha1(key.encode()).hexdigest()[:20]

    def template_ttr(self) -> str:
        """A sentence from the triple alone, for when no LLM-written TTR is wanted."""
        return f"{self.head} {self.relation} {self.tail}."


class Mention(BaseModel):
    """A passage names an entity (``(:Passage)-[:MENTIONS]->(:Entity)``)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["mention"] = "mention"
    passage_id: DocumentId
    entity: NonEmpty
    evidence: list[str] | None = None  # ExtractFrom.evidence, for a mention read from fields


class Rejected(BaseModel):
    """A source line a loader could not turn into a record, kept with its reason."""

    kind: Literal["rejected"] = "rejected"
    reason: str
    raw: str
    stage: str = "parse"


Record = Annotated[
    Document
    | Relation
    | Link
    | Refresh
    | EmbedFrom
    | ExtractFrom
    | CorpusTriple
    | Mention
    | Rejected,
    Field(discriminator="kind"),
]
RECORD_ADAPTER: TypeAdapter[Record] = TypeAdapter(Record)

INT64 = 2**63


def unstorable(raw: Any) -> str | None:
    """Why a record holds a value neither store takes, else None. Each of these passed
    validation and then failed its whole chunk, for good, or was changed silently:
    - text with a lone surrogate (an emoji's escape cut in half, `"\\ud83d"`): the
      tokenizer and Neo4j's driver raise on it;
    - NaN or an infinity: written as null, with nothing said;
    - an integer beyond 64 bits: Neo4j's driver raises, OpenSearch refuses it.
    Walked without recursion, as the record may nest as deep as its source did."""
    below: list[tuple[str, Any]] = [("", raw)]
    while below:
        path, value = below.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return f"{path or 'the record'}: text with a lone surrogate (not UTF-8)"
        elif isinstance(value, bool):
            continue
        elif isinstance(value, int) and not -INT64 <= value < INT64:
            return f"{path}: an integer beyond 64 bits"
        elif isinstance(value, float) and not math.isfinite(value):
            return f"{path}: {value} (no store keeps it; JSON has no such number)"
        elif isinstance(value, dict):
            for key, inner in value.items():
                below.append((f"{path}.{key}" if path else str(key), inner))
                below.append((f"{path} (a key)", key))
        elif isinstance(value, list):
            below.extend((f"{path}[{at}]", inner) for at, inner in enumerate(value))
    return None


def set_aside_if_unstorable(record: dict[str, Any]) -> Rejected | None:
    """`record` (as its model dumps it, before any JSON) as a rejected one when it holds a
    value neither store takes (`unstorable`); kept as text, since a dead letter could not
    hold the value either."""
    problem = unstorable(record)
    if problem is None:
        return None
    # Which record: "fields.score: nan" alone left a thousand-line file to search.
    named = record.get("id") or record.get("source") or record.get("passage_id")
    reason = f"{record.get('kind', 'record')} {named}: {problem}" if named else problem
    return Rejected(reason=reason[:500], raw=json.dumps(record, default=str), stage="validate")


def _flatten(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "; ".join(_flatten(item) for item in value)
    return json.dumps(value, ensure_ascii=False)
