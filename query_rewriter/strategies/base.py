"""The one interface every rewrite strategy implements."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any, Literal

from kgqr_core.settings import Settings
from query_rewriter.strategies.context import CONTEXT_SETTINGS, StrategyContext
from query_rewriter.strategies.params import COMMON, Param, param_value
from query_rewriter.strategies.rewrite import Rewrite

Kind = Literal["strategy", "baseline", "ablation"]


class Strategy(abc.ABC):
    """Turns a query into a Rewrite. Raises on failure; the caller falls back to `base`.

    `params`: the request parameters it reads (besides params.COMMON); `settings`: the
    Settings fields it reads that a request cannot set. The context refuses to read
    anything undeclared, so what a strategy declares is exactly what shapes its rewrites,
    and the cache key (`config`) is derived from it, with no list kept elsewhere."""

    name: str
    params: tuple[Param, ...] = ()
    settings: tuple[str, ...] = ()
    # The LLM calls one uncached rewrite makes: what the tune page and `--help` warn of
    # (15-80 s each on a 2-core CPU), and whether its rewrites are budgeted.
    llm_calls = 1
    # "strategy": one a user should choose from; "baseline": a seed paper's method, kept
    # for `kgqr eval` to compare against; "ablation": a method with one stage removed.
    kind: Kind = "strategy"
    # Whether its rewrites depend on the KB's optimised plan templates (the cache key then
    # carries their version).
    reads_plans = False
    # Whether its rewrites depend on the knowledge graph (the cache key then carries the
    # KB's graph version, so an ingest never leaves a rewrite of the old graph served).
    reads_graph = False

    @property
    def readable_params(self) -> tuple[Param, ...]:
        """Every request parameter it takes: the common ones and its own."""
        return (*COMMON, *self.params)

    @property
    def uses_llm(self) -> bool:
        """Its uncached rewrites wait on the LLM, so they are budgeted (KGQR_REWRITE_BUDGET_MS)."""
        return self.llm_calls > 0

    def own_time_s(self, settings: Settings) -> float:
        """A step's own time budget, set apart from the rewrite's (the agent's plan):
        the rewrite is given it on top of its whole budget, so the step's own limit, and
        its own fallback reason, are what a slow step meets."""
        return 0.0

    @abc.abstractmethod
    async def rewrite(self, query: str, ctx: StrategyContext) -> Rewrite: ...

    def declared(self) -> frozenset[str]:
        """The parameter and setting names its context may read."""
        names = (*(p.name for p in self.readable_params), *CONTEXT_SETTINGS, *self.settings)
        return frozenset(names)

    def config(self, values: Mapping[str, float], settings: Settings) -> dict[str, Any]:
        """Everything that shapes this strategy's rewrite: each declared parameter resolved
        (the request's value, else its setting's), each declared setting, the models."""
        return {
            "strategy": self.name,
            "params": {p.name: param_value(p, values, settings) for p in self.readable_params},
            "settings": settings.values({*CONTEXT_SETTINGS, *self.settings}),
        }
