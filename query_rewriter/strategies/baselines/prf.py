"""`prf`: pseudo-relevance feedback — append the top initial hits to the query."""

from __future__ import annotations

from query_rewriter.strategies.base import Strategy
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.params import PRF_DOCS
from query_rewriter.strategies.rewrite import Rewrite


class PseudoRelevanceFeedback(Strategy):
    name = "prf"
    llm_calls = 0
    kind = "baseline"
    params = (PRF_DOCS,)

    async def rewrite(self, query: str, ctx: StrategyContext) -> Rewrite:
        hits = await ctx.initial_hits(query, int(ctx.param(PRF_DOCS)))
        return Rewrite(
            strategy=self.name,
            query=query,
            expansions=[f"{hit['title']} {hit['text']}".strip() for hit in hits],
            details={"feedback_documents": [hit["id"] for hit in hits]},
        )
