"""Adding a strategy takes one module (its Strategy subclass and the parameters it reads)
and one registry line: planning, parameter checks, the rewrite and its explain follow."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from kgqr_core.settings import Settings
from query_rewriter import strategies
from query_rewriter.engine.errors import RewriteRequestError
from query_rewriter.search.cache import RewriteCache
from query_rewriter.search.plan import SearchPlan, plan_search
from query_rewriter.search.query_embedders import QueryEmbedders
from query_rewriter.search.rewriter import Rewriter
from query_rewriter.strategies.base import Strategy
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.params import Param
from query_rewriter.strategies.rewrite import Rewrite

REPEATS = Param("echo.repeats", "rewrite_prf_docs", 1, 5, integer=True)


class Echo(Strategy):
    """The whole module of a new strategy: it repeats the query as its expansion."""

    name = "echo"
    params = (REPEATS,)

    async def rewrite(self, query: str, ctx: StrategyContext) -> Rewrite:
        rewrite = Rewrite(strategy=self.name, query=query)
        rewrite.expansions = [query] * int(ctx.param(REPEATS))
        return rewrite


def test_a_new_strategy_is_one_class_and_one_registry_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(strategies.STRATEGIES, "echo", Echo())  # the registry line
    body = {"query": {"match": {"text": "heat"}}}
    index = "kgqr-m-documents"
    given = {"kgqr.strategy": "echo", "kgqr.param.echo.repeats": "2"}
    plan = plan_search(index, given, body, None)
    assert isinstance(plan, SearchPlan) and plan.params == {"echo.repeats": 2.0}
    with pytest.raises(RewriteRequestError):  # its range is checked like any other
        plan_search(index, {**given, "kgqr.param.echo.repeats": "9"}, body, None)

    async def embed(texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), 4), dtype=np.float32)

    async def meta_of(kb: str) -> None:
        return None  # a KB ingested before kgqr kept metadata

    embedders = QueryEmbedders.single(embed)
    rewriter = Rewriter(Settings(), None, RewriteCache(None, 0), embedders, meta_of)  # type: ignore[arg-type]
    rewrite = rewriter.rewrite(
        index=plan.index, kb=plan.kb, strategy="echo", query="heat", params=plan.params,
        gateway=None,  # type: ignore[arg-type]
        caller="c",
    )  # fmt: skip
    outcome = asyncio.run(rewrite)
    assert outcome.fallback is None and outcome.explain(None)["expansions"] == ["heat", "heat"]


def test_each_parameter_setting_has_the_parameter_range() -> None:
    """A request may set a parameter only within its range; the setting that gives its
    default is held to the same range, so a configured default is one a request could ask."""
    from annotated_types import Ge, Le

    from kgqr_core.settings import Settings
    from query_rewriter.strategies import ALL_PARAMS

    checked = 0
    for param in ALL_PARAMS:
        field = Settings.model_fields.get(param.setting)
        if field is None:  # derived (hybrid.bm25 from KGQR_HYBRID_WEIGHTS)
            continue
        low = [m.ge for m in field.metadata if isinstance(m, Ge)]
        high = [m.le for m in field.metadata if isinstance(m, Le)]
        assert (low, high) == ([param.low], [param.high]), param.name
        checked += 1
    assert checked >= 10


def test_a_misspelt_default_strategy_is_refused_up_front() -> None:
    from kgqr_core.settings import ConfigurationError
    from query_rewriter.strategies import check_default_strategy

    for accepted in (None, "base", "kar_boost", "graph"):
        check_default_strategy(accepted)
    with pytest.raises(ConfigurationError, match=r"'karr' is no strategy; valid: base, "):
        check_default_strategy("karr")
