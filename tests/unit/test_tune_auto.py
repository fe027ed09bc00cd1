"""`kgqr tune auto`'s rule: promote the best setting only when its cross-validated scores
beat base with an interval above zero and MRR is not shown worse; else keep base."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from plugin import kb_meta
from workbench.tuning.auto import StrategySetting, candidate_settings, decide
from workbench.tuning.routes import record_default

BASE, WALK = StrategySetting("base"), StrategySetting("graph_walk", (("graph.weight", 0.6),))
QUERIES = [f"q{i}" for i in range(20)]


def _scores(r5: float, mrr: float) -> dict[str, float]:
    return {"R@5": r5, "MRR": mrr}


def test_candidates_are_base_first_then_each_strategy_and_its_own_parameters() -> None:
    names = [s.name for s in candidate_settings(["base", "graph", "graph_walk"])]
    assert names[:2] == ["base", "graph"]
    assert "graph graph.weight=0.4" in names and "graph_walk graph.damping=0.5" in names
    assert not any(name.startswith("graph knn.k") for name in names)  # not its own


def test_a_setting_that_beats_base_on_every_fold_is_promoted() -> None:
    scored = {
        BASE: {q: _scores(0.5, 0.8) for q in QUERIES},
        WALK: {q: _scores(1.0, 0.8) for q in QUERIES},
    }
    decision = decide(scored, "R@5", folds=5)
    assert decision.promoted == WALK and decision.beats_base
    assert decision.validated.chosen() == {"graph_walk graph.weight=0.6": 5}
    assert "graph_walk graph.weight=0.6 beat base on 20 judged queries" in decision.reason()
    assert decision.evidence()["best_overall"] == WALK.name


def test_base_is_kept_when_the_gain_may_be_noise() -> None:
    """Better on two questions of twenty, worse on one: the interval holds zero."""
    walk = {q: _scores(0.5, 0.8) for q in QUERIES} | {"q0": _scores(1.0, 0.8),
                                                       "q1": _scores(1.0, 0.8),
                                                       "q2": _scores(0.0, 0.8)}  # fmt: skip
    decision = decide({BASE: {q: _scores(0.5, 0.8) for q in QUERIES}, WALK: walk}, "R@5", 5)
    assert decision.promoted == BASE and not decision.beats_base
    assert decision.best_overall == WALK  # the best on all queries, not shown to be better
    assert "no setting beat base" in decision.reason()


def test_base_is_kept_when_mrr_is_shown_worse() -> None:
    scored = {
        BASE: {q: _scores(0.5, 1.0) for q in QUERIES},
        WALK: {q: _scores(1.0, 0.5) for q in QUERIES},
    }
    decision = decide(scored, "R@5", folds=5)
    assert decision.promoted == BASE
    assert {c.metric: c.verdict for c in decision.against_base} == {"R@5": "better",
                                                                    "MRR": "worse"}  # fmt: skip


def test_a_handful_of_queries_promotes_nothing() -> None:
    """Five queries each better give an interval of one point above zero; too few to act on."""
    few = QUERIES[:5]
    scored = {
        BASE: {q: _scores(0.5, 0.8) for q in few},
        WALK: {q: _scores(1.0, 0.8) for q in few},
    }
    decision = decide(scored, "R@5", folds=5)
    assert decision.promoted is None and decision.best_overall == WALK
    assert "5 judged queries are too few to choose on" in decision.reason()
    assert "nothing recorded" in decision.reason()


def test_a_few_wins_among_ties_promote_nothing() -> None:
    """Four of ten questions better, six the same: an interval above zero at p = 0.125
    promoted the walk (the tune page's fewest queries are ten)."""
    ten = QUERIES[:10]
    walk = {q: _scores(0.5, 0.8) for q in ten} | {q: _scores(1.0, 0.8) for q in ten[:4]}
    decision = decide({BASE: {q: _scores(0.5, 0.8) for q in ten}, WALK: walk}, "R@5", 5)
    assert decision.promoted == BASE and not decision.beats_base


def test_ties_go_to_base_whatever_order_the_settings_come_in() -> None:
    """The tune page lists settings in the order their runs were stored: listed after
    the walk, base lost every tie, and the evidence named the walk as chosen."""
    same = {q: _scores(0.5, 0.8) for q in QUERIES}
    decision = decide({WALK: dict(same), BASE: dict(same)}, "R@5", folds=5)
    assert decision.best_overall == BASE and decision.validated.chosen() == {"base": 5}


def test_an_mrr_interval_wholly_below_zero_blocks_whatever_its_p_value() -> None:
    """The guard once read the verdict, which needs p < 0.05 since 2026-11-30: four
    questions' first hit lost and six alike gave an interval below zero at p = 0.125,
    and the setting was promoted."""
    ten = QUERIES[:10]
    base = {q: _scores(0.5, 1.0) for q in ten}
    walk = {q: _scores(1.0, 0.5 if q in ten[:4] else 1.0) for q in ten}
    decision = decide({BASE: base, WALK: walk}, "R@5", 5)
    mrr = next(c for c in decision.against_base if c.metric == "MRR")
    assert mrr.high < 0 and mrr.verdict == "not shown to differ"
    assert decision.promoted == BASE and not decision.beats_base


def test_a_promotion_and_a_set_default_at_once_both_land_as_consecutive_versions() -> None:
    """Written over whatever landed meanwhile, both numbered themselves N+1 and the later
    history dropped the other's version. A scripted kgqr-meta (as the engine answers
    `_update` with if_seq_no): a `kgqr kb set-default` lands between the page's read and
    its write."""
    first = kb_meta.KbDefault(version=1, strategy="graph", reason="r", set_by="s", set_at="t")
    meta = kb_meta.KnowledgeBaseMeta(kb="m", structure=kb_meta.DocumentStructure(),
                                     embedder="e", dimension=4, defaults=[first])  # fmt: skip

    class Meta:
        def __init__(self) -> None:
            self.source, self.seq_no, self.reads = meta.model_dump(mode="json"), 1, 0

        async def send(self, method: str, path: str, json: Any = None,
                       params: dict[str, str] | None = None) -> httpx.Response:  # fmt: skip
            request = httpx.Request(method, f"http://engine{path}")
            if method == "GET":
                self.reads += 1
                if self.reads == 1:  # a set-default lands after this read
                    landed = {"version": 2, "strategy": "base", "reason": "cli",
                              "set_by": "kgqr kb set-default", "set_at": "t"}  # fmt: skip
                    answer = {"_source": dict(self.source), "_seq_no": self.seq_no,
                              "_primary_term": 1}  # fmt: skip
                    self.source["defaults"] = [*self.source["defaults"], landed]
                    self.seq_no += 1
                    return httpx.Response(200, json=answer, request=request)
                answer = {"_source": self.source, "_seq_no": self.seq_no, "_primary_term": 1}
                return httpx.Response(200, json=answer, request=request)
            assert params is not None
            if int(params["if_seq_no"]) != self.seq_no:
                return httpx.Response(409, json={"status": 409}, request=request)
            self.source.update(json["doc"])
            self.seq_no += 1
            return httpx.Response(200, json={"result": "updated"}, request=request)

    engine = Meta()
    chosen = asyncio.run(record_default(engine, "m", "graph_walk", {}, "page", "tune page", {}))
    assert chosen.version == 3
    assert [(d["version"], d["strategy"]) for d in engine.source["defaults"]] == [
        (1, "graph"), (2, "base"), (3, "graph_walk")]  # fmt: skip


def test_what_is_promoted_is_judged_on_held_out_scores_not_on_all_queries() -> None:
    """Five settings, each better than base on one fold's six questions alone: on all 30
    queries each is shown better (6 wins, no loss, p = 2/64), but chosen on the other folds
    every fold's pick is one that gains nothing on it. Held out, nothing beats base."""
    from workbench.evaluation.cross_validation import folds_of
    from workbench.evaluation.significance import compare

    queries = [f"q{i:02d}" for i in range(30)]
    folds = folds_of(queries, 5)
    base = {q: _scores(0.0, 1.0) for q in queries}
    lucky = {StrategySetting("graph", (("graph.weight", 0.1 * (j + 1)),)):
             {q: _scores(1.0 if q in fold else 0.0, 1.0) for q in queries}
             for j, fold in enumerate(folds)}  # fmt: skip
    first = next(iter(lucky))
    recall = {q: s["R@5"] for q, s in lucky[first].items()}
    assert compare("R@5", "lucky", recall, "base", {q: 0.0 for q in queries}).verdict == "better"
    decision = decide({BASE: base, **lucky}, "R@5", folds=5)
    assert decision.best_overall == first
    assert decision.promoted == BASE and not decision.beats_base
    assert decision.validated.mean("R@5") == 0.0
