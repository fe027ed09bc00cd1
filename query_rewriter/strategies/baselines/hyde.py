"""`hyde` (HyDE) and `rar` (HyDE grounded on the top initial hits).

One LLM call samples n hypothetical documents in the knowledge base's document structure;
they are concatenated to the query and their mean embedding is fused with the query's.
"""

from __future__ import annotations

from typing import Any

from query_rewriter.strategies.base import Strategy
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.params import EXPANSIONS, PRF_DOCS, Param
from query_rewriter.strategies.rewrite import Rewrite


class HypotheticalDocuments(Strategy):
    """`grounded` (RAR): show the LLM the plain query's top hits first."""

    kind = "baseline"

    def __init__(self, name: str = "hyde", grounded: bool = False) -> None:
        self.name = name
        self.grounded = grounded
        self.params: tuple[Param, ...] = (EXPANSIONS, PRF_DOCS) if grounded else (EXPANSIONS,)

    async def rewrite(self, query: str, ctx: StrategyContext) -> Rewrite:
        rewrite = Rewrite(strategy=self.name, query=query)
        values: dict[str, Any] = {"query": query, "n": ctx.n_expansions,
                  "structure": ctx.structure_text}  # fmt: skip
        if self.grounded:
            hits = await ctx.initial_hits(query, int(ctx.param(PRF_DOCS)))
            rewrite.details["grounding_documents"] = [hit["id"] for hit in hits]
            values["documents"] = ctx.format_documents(hits)
        answer = await ctx.llm_json("generate", self.name, **values)
        rewrite.expansions = ctx.generated_documents(answer)
        if not rewrite.expansions:
            raise ValueError("the LLM returned no usable documents")
        return rewrite
