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
        index=plan.index, kb=plan.kb, strategy=plan.strategy, query="heat", params=plan.params,
        gateway=None,  # type: ignore[arg-type]
        caller="c",
    )  # fmt: skip
    outcome = asyncio.run(rewrite)
    assert outcome.fallback is None and outcome.explain(None)["expansions"] == ["heat", "heat"]


def test_each_parameter_setting_has_the_parameter_range() -> None:
    """A request may set a parameter only within its range; the setting that gives its
    default is held to the same range, so a configured default is one a request could ask."""
    from annotated_types import Ge, Le

    from kgqr_core.settings import FLAT, field_info
    from query_rewriter.strategies import ALL_PARAMS

    checked = 0
    for param in ALL_PARAMS:
        if param.setting not in FLAT:  # derived (hybrid.bm25 from KGQR_HYBRID_WEIGHTS)
            continue
        field = field_info(param.setting)
        low = [m.ge for m in field.metadata if isinstance(m, Ge)]
        high = [m.le for m in field.metadata if isinstance(m, Le)]
        assert (low, high) == ([param.low], [param.high]), param.name
        checked += 1
    assert checked >= 10


def test_a_misspelt_default_strategy_is_refused_up_front() -> None:
    from kgqr_core.settings import ConfigurationError
    from query_rewriter.strategies import check_default_strategy

    for accepted in (None, "auto", "base", "kar_boost", "graph"):
        check_default_strategy(accepted)
    with pytest.raises(ConfigurationError, match=r"'karr' is no strategy; valid: auto, base, "):
        check_default_strategy("karr")


def test_strategies_to_choose_come_before_the_baselines_and_ablations() -> None:
    """The seed papers' baselines and the ablations stay reachable (kgqr eval), grouped
    apart from the strategies a user should choose from, which `--help` lists first."""
    from query_rewriter.strategies import STRATEGIES, by_kind, menu

    kinds = {name: s.kind for name, s in STRATEGIES.items()}
    assert {n for n, k in kinds.items() if k == "baseline"} == {"prf", "hyde", "rar", "agr"}
    assert {n for n, k in kinds.items() if k == "ablation"} == {
        "kar_no_kg", "kar_no_drf", "kar+boost", "kgcqr_no_ttr", "kgcqr_no_completion"
    }  # fmt: skip
    ordered = [s.kind for s in by_kind()]
    assert ordered == sorted(ordered, key=("strategy", "baseline", "ablation").index)
    calls = {name: s.llm_calls for name, s in STRATEGIES.items()}
    assert calls["base"] == calls["graph"] == calls["prf"] == calls["agent"] == 0
    assert (calls["kar"], calls["kar_index"], calls["kgcqr"], calls["agr"]) == (2, 1, 2, 5)
    assert not STRATEGIES["graph"].uses_llm and STRATEGIES["hyde"].uses_llm
    listed = menu()
    assert listed.index("graph") < listed.index("baselines: prf") < listed.index("ablations")
    assert "kar (2 LLM calls)" in listed and "graph," in listed


def test_the_tune_page_preselects_base_and_the_default_never_a_costly_baseline() -> None:
    from workbench.tuning.routes import preselected

    assert preselected("base") == ["base", "graph"]
    assert preselected(None) == ["base", "graph"]
    assert preselected("kar") == ["base", "kar"]


def test_each_models_auto_default_is_an_llm_free_strategy_and_the_tune_page_reads_auto() -> None:
    """A typo in the registry would make every default search on that model's knowledge
    bases a 400; an LLM strategy would make each one wait on the LLM."""
    from kgqr_core.embedder_models import MODELS, default_strategy
    from query_rewriter.strategies import STRATEGIES
    from workbench.tuning.routes import RECOMMENDED, preselected

    for name, model in MODELS.items():
        assert model.default_strategy in STRATEGIES, name
        assert not STRATEGIES[model.default_strategy].uses_llm, name
    assert default_strategy("embeddinggemma-300m") == "graph"
    assert default_strategy(None) == default_strategy("/a/folder") == "base"
    assert preselected("auto") == ["base", RECOMMENDED]


def test_a_kbs_default_takes_the_parameters_every_strategy_reads() -> None:
    """`kgqr kb set-default shop base --param hybrid.bm25=0.3` was refused ("NAME one of
    none"), though the proxy takes it in a default and `kgqr eval` in a run; a parameter
    no strategy of the name reads still is."""
    import click

    from kgqr_ops.cli_options import strategy_params

    assert strategy_params(("hybrid.bm25=0.3",), "base") == {"hybrid.bm25": 0.3}
    assert strategy_params(("knn.k=50", "graph.weight=0.4"), "graph") == {
        "knn.k": 50.0, "graph.weight": 0.4}  # fmt: skip
    with pytest.raises(click.BadParameter, match=r"hybrid\.bm25"):
        strategy_params(("kar.k=3",), "graph")
