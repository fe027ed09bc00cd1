"""What kgqr says about a rewritten search (`kgqr.explain=true`, the query log, the tune
page, `kgqr eval`): typed, so every reader and writer agrees on its keys."""

from __future__ import annotations

from typing import Any, TypedDict


class Fallback(TypedDict):
    """Why a search ran the plain query: the stage that failed, why (no addresses), and
    the strategy that was asked for."""

    stage: str
    reason: str
    strategy: str


class Budget(TypedDict):
    """A budgeted search answered before its LLM rewrite was ready: what it was answered
    with, and the rewrite still running for the next identical search (None: not queued,
    the background was full)."""

    served: str
    pending: str | None
    budget_ms: int


class Explain(TypedDict, total=False):
    strategy: str  # the strategy applied (`base` after a fallback)
    query: str
    expansions: list[str]
    context: str | None
    details: dict[str, Any]  # the strategy's own evidence (entities, neighbours, triples)
    alpha: float
    stages_ms: dict[str, float]
    fallback: Fallback | None
    budget: Budget | None
    cached: bool
    llm_calls: int
    cached_llm_calls: int
    llm_prompt_chars: dict[str, int]
    final_query: dict[str, Any] | None
    fusion: str | None  # "pipeline", "client ...", or None when no hybrid search ran
    hits_from: str  # what the hits and hits.total are drawn from (engine/original_facets.py)
    signals: list[str]  # what ranked them: "bm25", "knn" (a vector field), "graph" (boosts)
    # kgqr's vectors of an attached index without any (search/side_vectors.py): the side
    # index, the caller's candidates, and how many had a vector the caller's fetch vouched for
    side_vectors: dict[str, Any]
    # What the caller's query demands of every hit beyond one word ("a phrase
    # [match_phrase]"): the query then filters every side, and hits are its hits.
    kept_as_filter: str
    warnings: list[str]  # deprecated parameter spellings the request used
    # The knowledge base's own default that served a search naming no strategy: version,
    # strategy, params, reason, set_by, set_at (plugin.kb_meta.KbDefault)
    default: dict[str, Any]
    # OpenSearch refused the caller's credentials or their search of the index (no such
    # index, no permission): its status, and no rewrite
    refused: int
    passed_through: str  # why kgqr sent the search on as it came (then the only key)
