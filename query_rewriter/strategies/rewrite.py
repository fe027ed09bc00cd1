"""What a strategy returns, and the stage timer that makes every rewrite explain itself."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StageTimer:
    """Milliseconds per named stage; remembers the stage running when something failed."""

    stages_ms: dict[str, float] = field(default_factory=dict)
    # Stages run side by side in a graph strategy (plain hits beside triple seeds): the
    # latest still running is current, and a stage that failed stays in the list.
    _running: list[str] = field(default_factory=list, repr=False)

    @property
    def current(self) -> str | None:
        return self._running[-1] if self._running else None

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self._running.append(name)
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed = (time.perf_counter() - started) * 1000
            self.stages_ms[name] = round(self.stages_ms.get(name, 0.0) + elapsed, 2)
        self._running.remove(name)

    def settle(self) -> None:
        """The strategy is over, whatever it left running or failed in: stages after it
        (the embed, the search) start from none."""
        self._running.clear()


@dataclass
class LlmUsage:
    """The LLM calls one rewrite made. Kept beside the Rewrite, like the StageTimer, so a
    rewrite that fails half-way still reports the calls it made and what they cost."""

    calls: int = 0
    cached: int = 0
    # characters of each LLM prompt by stage: on a CPU LLM the prompt's length is its cost
    prompt_chars: dict[str, int] = field(default_factory=dict)


@dataclass
class Rewrite:
    """A strategy's decision for one query.

    ``expansions`` are appended to the query for the BM25 side; ``context`` (when set) is
    the text whose embedding is fused with the query vector, else the expansions are.
    ``details`` holds whatever the strategy decided on the way (entities, hits used,
    triples), for the explain object.
    """

    strategy: str
    query: str
    expansions: list[str] = field(default_factory=list)
    context: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    boost_ids: dict[str, float] = field(default_factory=dict)  # doc id -> weight, BM25 side
    # The boost sub-query's share of the hybrid score, when the strategy sets its own (the
    # agent's answers are the ranking); else the settings' hybrid_boost_weights.
    boost_share: float | None = None
    # Documents the rewrite names or states without having fetched them (a triple's
    # passage, a seed read by id alone): with its boosts and what its searches returned,
    # what a cached copy of it is re-checked against (search/evidence.py).
    sources: list[str] = field(default_factory=list)

    def graph_linked(self) -> set[str]:
        """The boosted documents the graph linked to the query (the explain's graph
        nodes): those a search may add to the caller's matches. Other boosts (the plain
        hits a strategy marks, an LLM's picks) only reorder the matches."""
        nodes = self.details.get("graph_nodes") or []
        linked = {str(node["id"]) for node in nodes if isinstance(node, dict) and "id" in node}
        return {doc for doc in linked if self.boost_ids.get(doc, 0) > 0}

    @property
    def expanded_text(self) -> str:
        return " ".join([self.query, *self.expansions]).strip()

    @property
    def context_texts(self) -> list[str]:
        if self.context:
            return [self.context]
        return list(self.expansions)
