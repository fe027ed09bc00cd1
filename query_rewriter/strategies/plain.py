"""`base`: the query as is (the KAR paper's baseline), still searched hybrid."""

from __future__ import annotations

from query_rewriter.strategies.base import Strategy
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.rewrite import Rewrite


class PlainQuery(Strategy):
    name = "base"
    llm_calls = 0

    async def rewrite(self, query: str, ctx: StrategyContext) -> Rewrite:
        return Rewrite(strategy=self.name, query=query)
