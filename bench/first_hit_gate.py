"""Would a per-query gate help: a graph strategy that falls back to base when the plain
search is unsure of its first hit? (#55 names "a per-query gate that falls back to base
when the graph's evidence is weak".)

Every graph strategy keeps the plain first hit on top and builds on it, so its MRR is lost
where that hit is wrong and the relevant document below it is pushed down. The gate's
signal is the margin between the plain search's first two normalised hybrid scores (of the
seed search: `graph.seeds` hits), known before any graph lookup, so a gated search would
cost nothing. Below a margin `tau`, the gated strategy's ranking is base's, which is exact:
the fallback is base's own search. So the gate is simulated here, not built, from the
strategies' and base's rankings of every question.

Each threshold is scored; the choice among them is cross-validated (five folds, chosen on
R@5 + MRR: the gate trades one for the other, and R@5 alone would never pick one that only
protects MRR), and the held-out scores are compared, question by question, to the ungated
strategy and to base (95% bootstrap interval, randomization p).

    python -m bench.first_hit_gate --set musique --kb musique-gemma
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import httpx
from scipy.stats import mannwhitneyu

from bench.bench_common import (
    comparisons_text,
    dev_queries,
    dev_set_parser,
    proxy_process,
    save,
)
from kgqr_core.settings import get_settings
from plugin import schema
from query_rewriter.strategies.graph.walk import SEEDS
from workbench.evaluation.cross_validation import Candidate, PerQuery, cross_validate
from workbench.evaluation.query_sets import JudgedQuery
from workbench.evaluation.significance import compare_runs
from workbench.tuning.auto import BASELINE, StrategySetting, score_settings

STRATEGIES = ("graph", "graph_walk", "graph_mix")
TAUS = (0.0, 0.02, 0.05, 0.1, 0.15, 0.2)  # 0: never gated, listed first so it wins ties
FOLDS = 5
CHOSEN_ON = "R@5+MRR"
SHOWN = ("R@5", "MRR", "nDCG@10")


def seed_margin(client: httpx.Client, url: str, kb: str, query: JudgedQuery, seeds: int) -> float:
    """The plain search's first normalised score minus its second, at the seeds' depth."""
    body = {"query": {"match": {"text": query.text}}, "size": seeds, "_source": False}
    answer = client.post(f"{url}/{schema.documents_index(kb)}/_search",
                         params={"kgqr.strategy": BASELINE}, json=body)  # fmt: skip
    answer.raise_for_status()
    scores = [float(hit["_score"]) for hit in answer.json()["hits"]["hits"]]
    return scores[0] - scores[1] if len(scores) > 1 else 1.0


def separation(margins: Mapping[str, float], wrong: list[str]) -> float | None:
    """How well the margin tells a wrong first hit from a right one: the chance that a
    wrong one's margin is below a right one's (the ROC area; 0.5 is no better than chance)."""
    right = [margin for q, margin in margins.items() if q not in wrong]
    if not wrong or not right:
        return None
    found = mannwhitneyu(right, [margins[q] for q in wrong])
    return float(found.statistic) / (len(right) * len(wrong))


def gated(strategy: PerQuery, base: PerQuery, margins: Mapping[str, float], tau: float) -> PerQuery:
    """The strategy's scores where the margin reaches tau, base's below it, each with the
    sum the folds choose on."""
    chosen = {q: base[q] if margins[q] < tau else strategy[q] for q in strategy}
    return {q: {**scores, CHOSEN_ON: scores["R@5"] + scores["MRR"]} for q, scores in chosen.items()}


def shown(comparisons: list[dict[str, Any]]) -> str:
    return comparisons_text(comparisons, SHOWN)


def judged(
    name: str, runs: PerQuery, base: PerQuery, margins: Mapping[str, float]
) -> dict[str, Any]:
    """One strategy's gate: what each threshold changes, and the cross-validated choice
    against the ungated strategy and against base."""
    by_tau = {tau: gated(runs, base, margins, tau) for tau in TAUS}
    ungated = by_tau[0.0]
    thresholds = [
        {"tau": tau, "gated": sum(1 for m in margins.values() if m < tau),
         "against_ungated": [c.as_json() for c in compare_runs(
             {"ungated": ungated, "gated": scores}, "ungated", SHOWN)]}
        for tau, scores in by_tau.items() if tau > 0
    ]  # fmt: skip
    validated = cross_validate(
        [Candidate(f"tau={tau:g}", scores) for tau, scores in by_tau.items()], CHOSEN_ON, FOLDS
    )
    held_out = validated.per_query
    plain = gated(base, base, margins, 0.0)  # base's scores, with the sum the folds chose on
    return {
        "thresholds": thresholds,
        "chosen_per_fold": validated.chosen(),
        "held_out_against_ungated": [c.as_json() for c in compare_runs(
            {"ungated": ungated, name: held_out}, "ungated", SHOWN)],
        "held_out_against_base": [c.as_json() for c in compare_runs(
            {BASELINE: plain, name: held_out}, BASELINE, SHOWN)],
        "ungated_against_base": [c.as_json() for c in compare_runs(
            {BASELINE: plain, name: ungated}, BASELINE, SHOWN)],
    }  # fmt: skip


def main() -> None:
    args = dev_set_parser(__doc__.split("\n\n")[0]).parse_args()
    queries = dev_queries(args.set, args.data)
    settings = [StrategySetting(BASELINE), *map(StrategySetting, STRATEGIES)]
    pacing = {"size": 20, "concurrency": 1, "headers": {}}
    with (
        proxy_process({"KGQR_REWRITE_CACHE_TTL_S": "0"}) as proxy,
        httpx.Client(timeout=120) as client,
    ):
        seeds = int(SEEDS.default(get_settings()))
        margins = {q.id: seed_margin(client, proxy.url, args.kb, q, seeds) for q in queries}
        scored = asyncio.run(score_settings(proxy.url, args.kb, queries, settings, {}, pacing))
    base = scored[StrategySetting(BASELINE)]
    wrong = sorted(q for q, scores in base.items() if scores["Hit@1"] == 0)
    figures: dict[str, Any] = {
        "set": args.set, "kb": args.kb, "folds": FOLDS, "chosen_on": CHOSEN_ON,
        "margins": margins, "first_hit_wrong": {q: margins[q] for q in wrong},
        "margin_separates_wrong_first_hits": separation(margins, wrong),
        "strategies": {s: judged(s, scored[StrategySetting(s)], base, margins)
                       for s in STRATEGIES},
    }  # fmt: skip
    area = figures["margin_separates_wrong_first_hits"]
    print(f"{args.kb}: base's first hit is wrong on {len(wrong)} of {len(queries)} questions, "
          f"margins {', '.join(f'{margins[q]:.3f}' for q in wrong)}; the margin tells them from "
          f"right ones with ROC area {area if area is None else round(area, 2)}")  # fmt: skip
    for strategy, found in figures["strategies"].items():
        for row in found["thresholds"]:
            print(f"  {strategy:>10} tau {row['tau']:<4g} gated {row['gated']:>2}: "
                  f"{shown(row['against_ungated'])}")  # fmt: skip
        print(f"  {strategy:>10} folds chose {found['chosen_per_fold']}")
        print(f"  {strategy:>10} held out vs ungated: {shown(found['held_out_against_ungated'])}")
        print(f"  {strategy:>10} held out vs base:    {shown(found['held_out_against_base'])}")
        print(f"  {strategy:>10} ungated vs base:     {shown(found['ungated_against_base'])}")
    save(f"first-hit-gate-{args.kb}", figures)


if __name__ == "__main__":
    main()
