"""What kgqr knows about each knowledge base besides its documents: the document
structure prompts describe, and the embedder its vectors came from. Stored as one
document per knowledge base in the ``kgqr-meta`` index."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, Field

from plugin.field_map import FieldMap
from plugin.schema import META_INDEX, check_kb_name


class DocumentStructure(BaseModel):
    """The types of a knowledge base and their fields (KAR Table 9), for prompts."""

    types: dict[str, list[str]] = Field(default_factory=dict)
    relations: list[str] = Field(default_factory=list)

    def merge(self, other: DocumentStructure) -> DocumentStructure:
        types = {name: list(fields) for name, fields in self.types.items()}
        for name, fields in other.types.items():
            known = types.setdefault(name, [])
            known.extend(field for field in fields if field not in known)
        relations = list(dict.fromkeys([*self.relations, *other.relations]))
        return DocumentStructure(types=types, relations=relations)

    def describe(self) -> str:
        """The structure as prompt text: one line per type with its fields."""
        lines = [f"- {name}: {', '.join(fields) or 'text'}" for name, fields in self.types.items()]
        if self.relations:
            lines.append(f"Relations: {', '.join(self.relations)}")
        return "\n".join(lines)


class KnowledgeBaseMeta(BaseModel):
    kb: str
    structure: DocumentStructure
    embedder: str
    dimension: int
    # The embedder's document form its vectors were made in (embedder_models.py); meta
    # written before forms were versioned holds the first.
    document_revision: int = 1
    # The agent strategy's optimised plan templates (`kgqr agent optimize`), as JSON text:
    # plans hold values of any type, which a mapped object field would fix at first sight.
    agent_plans: str | None = None
    # An index the team attached (`kgqr kb attach`): its field map; None for a knowledge
    # base kgqr ingested into its own indices.
    attached: FieldMap | None = None
    # An attached index's sync checkpoints: "index/shard" -> the highest _seq_no synced.
    synced: dict[str, int] | None = None

    def fields(self) -> FieldMap:
        """Where this knowledge base's documents keep their words and vectors."""
        if self.attached is not None:
            return self.attached
        return FieldMap.own(self.kb, self.embedder, self.dimension)


def load(client: Any, kb: str) -> KnowledgeBaseMeta | None:
    if not client.exists(index=META_INDEX, id=check_kb_name(kb)):
        return None
    return KnowledgeBaseMeta.model_validate(client.get(index=META_INDEX, id=kb)["_source"])


def save(client: Any, meta: KnowledgeBaseMeta) -> KnowledgeBaseMeta:
    """Store meta, merging its structure into what earlier jobs recorded; stored agent
    plans and an attached index's field map are kept when `meta` has none (an ingest or
    graph job knows nothing of them), so only `clear_agent_plans` and a detach remove them."""
    existing = load(client, meta.kb)
    if existing is not None:
        meta = meta.model_copy(
            update={
                "structure": existing.structure.merge(meta.structure),
                "agent_plans": meta.agent_plans or existing.agent_plans,
                "attached": meta.attached or existing.attached,
                "synced": meta.synced or existing.synced,
            }
        )
    body = {**meta.model_dump(), "updated": dt.datetime.now(dt.UTC).isoformat()}
    client.index(index=META_INDEX, id=meta.kb, body=body, refresh=True)
    return meta


def clear_agent_plans(client: Any, kb: str) -> bool:
    """Drop the KB's agent plans (the `agent` strategy then serves `base`); False if it
    had none."""
    meta = load(client, kb)
    if meta is None or meta.agent_plans is None:
        return False
    body = {"doc": {"agent_plans": None, "updated": dt.datetime.now(dt.UTC).isoformat()}}
    client.update(index=META_INDEX, id=kb, body=body, refresh=True)
    return True
