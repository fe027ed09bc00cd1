"""The one interface every rewrite strategy implements."""

from __future__ import annotations

import abc

from query_rewriter.rewrite import Rewrite
from query_rewriter.strategies.context import StrategyContext


class Strategy(abc.ABC):
    """Turns a query into a Rewrite. Raises on failure; the caller falls back to `base`."""

    name: str

    @abc.abstractmethod
    async def rewrite(self, query: str, ctx: StrategyContext) -> Rewrite: ...
