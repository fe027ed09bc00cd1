"""The one interface every rewrite strategy implements."""

from __future__ import annotations

import abc

from query_rewriter.rewrite import Rewrite
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.params import Param


class Strategy(abc.ABC):
    """Turns a query into a Rewrite. Raises on failure; the caller falls back to `base`.
    `params`: the request parameters it reads (besides params.COMMON), which requests may
    set and the explain and cache key account for."""

    name: str
    params: tuple[Param, ...] = ()

    @abc.abstractmethod
    async def rewrite(self, query: str, ctx: StrategyContext) -> Rewrite: ...
