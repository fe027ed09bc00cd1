"""A knowledge base's optimised plan templates, one per query category, and the choice of
one for a query: the category whose training questions the query is most like (cosine to
the mean of their vectors), so no LLM call is needed online."""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from plugin.kb_meta import KnowledgeBaseMeta


class PlanEntry(BaseModel):
    category: str
    template: dict[str, Any]
    # Training questions of the category (a sample): what routes a query to this template.
    examples: list[str] = Field(default_factory=list)
    # split -> metric -> value, as measured when the template was chosen
    scores: dict[str, dict[str, float]] = Field(default_factory=dict)
    history: list[dict[str, Any]] = Field(default_factory=list)


class PlanBook(BaseModel):
    version: int = 1
    created: str = Field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat())
    llm_model: str = ""
    entries: list[PlanEntry] = Field(default_factory=list)

    def fingerprint(self) -> str:
        """What tells this book from any other, for what is kept of it (the router's
        centroids, cached rewrites): its version is not, since a book optimised after
        `kgqr agent clear`, or by two runs at once, numbers itself as an earlier one did."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]


def book_of(meta: KnowledgeBaseMeta | None) -> PlanBook | None:
    if meta is None or not meta.agent_plans:
        return None
    return PlanBook.model_validate_json(meta.agent_plans)


class Router:
    """Per knowledge base and embedder, of its current book: the centroid of each
    category's examples (an earlier book's are let go)."""

    def __init__(self) -> None:
        self._centroids: dict[tuple[str, str], tuple[str, np.ndarray]] = {}

    async def choose(
        self, book: PlanBook, key: tuple[str, str], query_vector: np.ndarray, embed: Any
    ) -> tuple[PlanEntry, float]:
        """The entry for a query and its similarity; `key` is (kb, embedder model)."""
        if len(book.entries) == 1:
            return book.entries[0], 1.0
        fingerprint = book.fingerprint()
        kept = self._centroids.get(key)
        if kept is None or kept[0] != fingerprint:
            rows = []
            for entry in book.entries:
                vectors = await embed(entry.examples or [entry.category])
                mean = np.asarray(vectors).mean(axis=0)
                rows.append(mean / (np.linalg.norm(mean) or 1.0))
            kept = fingerprint, np.vstack(rows)
            self._centroids[key] = kept
        similarity = kept[1] @ np.asarray(query_vector)
        best = int(np.argmax(similarity))
        return book.entries[best], float(similarity[best])
