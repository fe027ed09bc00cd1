"""What a knowledge base is made of, as it crosses from loaders into ingest tasks.

Loaders yield these records; tasks receive them as JSON in Celery messages and validate
them again there, because a message is the boundary where a bad record is set aside.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    field_validator,
)

from plugin.schema import has_name_characters

NonEmpty = Annotated[str, Field(min_length=1, max_length=512)]


def _nameable(value: str) -> str:
    if not has_name_characters(value):
        raise ValueError(f"{value!r} has no letters or digits to name a graph type with")
    return value


# A document type or relation name, which becomes a Neo4j label or relationship type.
GraphName = Annotated[NonEmpty, AfterValidator(_nameable)]


class Document(BaseModel):
    """A node with text: id, type, named fields, and the text rendered from them."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["document"] = "document"
    id: NonEmpty
    type: GraphName
    title: str = ""
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
    source: NonEmpty
    type: GraphName
    target: NonEmpty
    properties: dict[str, str | int | float | bool] = Field(default_factory=dict)


class CorpusTriple(BaseModel):
    """A (head, relation, tail) fact extracted from one passage (KG-CQR's corpus KG)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["triple"] = "triple"
    head: NonEmpty
    relation: NonEmpty
    tail: NonEmpty
    passage_id: NonEmpty
    ttr: str | None = None
    ttr_source: Literal["llm", "template", "given"] | None = None

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
    passage_id: NonEmpty
    entity: NonEmpty


class Rejected(BaseModel):
    """A source line a loader could not turn into a record, kept with its reason."""

    kind: Literal["rejected"] = "rejected"
    reason: str
    raw: str
    stage: str = "parse"


Record = Annotated[
    Document | Relation | CorpusTriple | Mention | Rejected, Field(discriminator="kind")
]
RECORD_ADAPTER: TypeAdapter[Record] = TypeAdapter(Record)


def _flatten(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "; ".join(_flatten(item) for item in value)
    return json.dumps(value, ensure_ascii=False)
