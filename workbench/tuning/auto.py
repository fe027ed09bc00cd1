"""`kgqr tune auto`: a knowledge base's default chosen from its own judged queries, and
kept only on evidence that it beats plain search on questions the choice did not see.

Every LLM-free strategy is scored at its configured parameters and at each value of its
main parameters (one at a time, sweep.DEFAULT_GRID), on every judged query. The choice is
cross-validated (cross_validation.py): on each fold, the setting best on the other folds'
queries is scored on that fold's. The setting best on all queries is promoted only if
those held-out scores beat base's with a 95% interval above zero (and a randomization
test's p below 0.05: significance.PairedComparison.verdict) on the chosen metric and MRR
is not shown to be worse (its interval not wholly below zero); otherwise base is
recorded. On fewer than MIN_QUERIES judged queries nothing is recorded: too few to show
anything, they must not replace the default the knowledge base has
(KGQR_REWRITE_DEFAULT_STRATEGY=auto gives Gemma's KBs `graph`).
The evidence is printed, and recorded with the default (plugin.kb_meta.KbDefault).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from query_rewriter.strategies import STRATEGIES
from workbench.evaluation.cross_validation import (
    Candidate,
    CrossValidated,
    cross_validate,
    mean_of,
)
from workbench.evaluation.query_sets import JudgedQuery
from workbench.evaluation.runner import EvalTarget, evaluate
from workbench.evaluation.significance import PairedComparison, compare_runs
from workbench.evaluation.sweep import DEFAULT_GRID

BASELINE = "base"
# LLM-free strategies a default may be: the agent needs plans of its own (`kgqr agent
# optimize`) and is left to be named.
CANDIDATE_STRATEGIES = ("base", "graph", "graph_walk", "graph_mix", "prf")
GUARD_METRIC = "MRR"  # never promoted if shown worse on this
# Fewer judged queries promote nothing: with every difference alike, a handful gives an
# interval of one point above zero (two queries each better: "better", at p = 0.5).
MIN_QUERIES = 10
PerQuery = dict[str, dict[str, float]]


@dataclass(frozen=True)
class StrategySetting:
    """A strategy and the parameters it is given (pairs, so a setting can key a dict)."""

    strategy: str
    given: tuple[tuple[str, float], ...] = ()

    @property
    def params(self) -> dict[str, float]:
        return dict(self.given)

    @property
    def name(self) -> str:
        values = " ".join(f"{k}={v:g}" for k, v in sorted(self.params.items()))
        return f"{self.strategy} {values}".strip()


def candidate_settings(strategies: Sequence[str]) -> list[StrategySetting]:
    """Base first (it wins ties), then each strategy at its configured parameters and at
    each grid value of each of its own parameters."""
    settings = [StrategySetting(BASELINE)]
    for strategy in strategies:
        if strategy == BASELINE:
            continue
        settings.append(StrategySetting(strategy))
        own = {param.name for param in STRATEGIES[strategy].params}
        for name, values in DEFAULT_GRID.items():
            if name in own:
                settings.extend(StrategySetting(strategy, ((name, value),)) for value in values)
    return settings


@dataclass(frozen=True)
class Decision:
    """What `tune auto` found and chose."""

    promoted: StrategySetting | None  # None: too few queries to record anything
    best_overall: StrategySetting
    metric: str
    validated: CrossValidated
    against_base: list[PairedComparison]  # the held-out scores against base
    queries: int
    candidates: int

    @property
    def beats_base(self) -> bool:
        chosen = self.promoted
        return chosen is not None and (chosen.strategy != BASELINE or bool(chosen.params))

    def reason(self) -> str:
        shown = "; ".join(f"{c.metric} {c.as_text()}" for c in self.against_base)
        folds = len(self.validated.folds)
        if self.promoted is None:
            return (f"tune auto: {self.queries} judged queries are too few to choose on (at "
                    f"least {MIN_QUERIES}): nothing recorded: {shown}")  # fmt: skip
        if self.beats_base:
            return (f"tune auto: {self.promoted.name} beat base on {self.queries} judged "
                    f"queries, cross-validated over {folds} folds: {shown}")  # fmt: skip
        return (f"tune auto: no setting beat base with a {self.metric} interval above 0 "
                f"(p < 0.05) and "
                f"{GUARD_METRIC}'s interval not below 0, cross-validated over {folds} folds on "
                f"{self.queries} judged queries: {shown}")  # fmt: skip

    def evidence(self) -> dict[str, Any]:
        return {
            "rule": f"promote the setting best on all queries only if its cross-validated "
                    f"{self.metric} beats base with a 95% interval above 0 (p < 0.05) and "
                    f"{GUARD_METRIC}'s interval is not wholly below 0",
            "metric": self.metric,
            "queries": self.queries,
            "candidates": self.candidates,
            "best_overall": self.best_overall.name,
            "chosen_per_fold": self.validated.chosen(),
            "held_out": {m: self.validated.mean(m) for m in (self.metric, GUARD_METRIC)},
            "against_base": [c.as_json() for c in self.against_base],
        }  # fmt: skip


def decide(
    scored: Mapping[StrategySetting, PerQuery], metric: str, folds: int, seed: int = 0
) -> Decision:
    """The rule, over settings already scored on every query (base's among them)."""
    base = next(s for s in scored if s.strategy == BASELINE and not s.params)
    # Base first, so that every tie (a fold's choice, the best overall) goes to it: the
    # tune page lists settings in the order its runs were stored.
    settings = [base, *(s for s in scored if s != base)]
    candidates = [Candidate(s.name, scored[s]) for s in settings]
    validated = cross_validate(candidates, metric, folds, seed)
    runs = {BASELINE: scored[base], "held-out": validated.per_query}
    against = compare_runs(runs, BASELINE, [metric, GUARD_METRIC])
    by_metric = {c.metric: c for c in against}
    best = max(settings, key=lambda s: mean_of(scored[s], metric))  # the first of equals
    enough = len(scored[base]) >= MIN_QUERIES
    # The guard stays the interval's alone: one wholly below zero blocks, whatever the
    # p-value (a guard errs toward keeping base).
    wins = enough and by_metric[metric].verdict == "better" and by_metric[GUARD_METRIC].high >= 0
    return Decision(
        promoted=best if wins else base if enough else None,
        best_overall=best,
        metric=metric,
        validated=validated,
        against_base=against,
        queries=len(scored[base]),
        candidates=len(settings),
    )


def shown_candidates(per_strategy: Mapping[str, PerQuery]) -> dict[StrategySetting, PerQuery]:
    """The tune page's candidates: each LLM-free strategy it showed for every judged query
    base was shown for, on those queries (its configured parameters: the page sets none)."""
    base = per_strategy.get(BASELINE, {})
    return {
        StrategySetting(name): {query: scores[query] for query in base}
        for name, scores in per_strategy.items()
        if name in STRATEGIES and not STRATEGIES[name].uses_llm and base.keys() <= scores.keys()
    }


async def score_settings(
    proxy_url: str,
    kb: str,
    queries: Sequence[JudgedQuery],
    settings: Sequence[StrategySetting],
    base_params: Mapping[str, float],
    pacing: Mapping[str, Any],
    target: EvalTarget | None = None,
    on_scored: Callable[[StrategySetting], None] | None = None,
) -> dict[StrategySetting, PerQuery]:
    """Each setting's per-query scores, searched through the proxy as the caller."""
    scored = {}
    for setting in settings:
        params = {**base_params, **setting.params}
        report = await evaluate(
            proxy_url, kb, queries, [setting.strategy], params, **pacing, target=target
        )
        scored[setting] = report.per_query()[setting.strategy]
        if on_scored is not None:
            on_scored(setting)
    return scored
