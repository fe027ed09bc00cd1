"""The evidence for the global default: which LLM-free strategy is not worse than base on
any metric, on both dev sets, when its parameters are chosen by cross-validation.

For each dev set and each LLM-free strategy, every setting `kgqr tune auto` would try
(the strategy at its configured parameters and at each grid value of its own parameters)
is scored on every question; the choice among them is cross-validated on R@5 (chosen on
four folds among the strategy's own settings, scored on the fifth), and those held-out
scores are compared to base's, question by question, on every metric (95% bootstrap
interval, randomization p). The
strategy at its configured parameters is compared too, though its parameters were chosen
on these very questions. A strategy may become the global default only if no metric's
held-out interval lies below zero on either set.

    python -m bench.global_default [--data ../shared/data] [--kb-suffix -gemma]
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from bench.bench_common import (
    DEV_SETS,
    REPO,
    comparisons_text,
    dev_queries,
    proxy_process,
    save,
)
from workbench.evaluation.cross_validation import Candidate, cross_validate
from workbench.evaluation.metrics import METRIC_NAMES
from workbench.evaluation.significance import compare_runs
from workbench.tuning.auto import (
    BASELINE,
    CANDIDATE_STRATEGIES,
    StrategySetting,
    candidate_settings,
    score_settings,
)

FOLDS = 5
SHOWN = ("R@5", "MRR", "nDCG@10")


def judged(scored: dict[StrategySetting, Any], strategy: str) -> dict[str, Any]:
    """One strategy's cross-validated and configured comparisons to base on every metric.
    The folds choose among the strategy's own settings only: a choice that may fall back
    to base says nothing of the strategy as a default."""
    own = [Candidate(s.name, runs) for s, runs in scored.items() if s.strategy == strategy]
    validated = cross_validate(own, "R@5", FOLDS)
    base = scored[StrategySetting(BASELINE)]
    held_out = compare_runs({BASELINE: base, strategy: validated.per_query},
                            BASELINE, METRIC_NAMES)  # fmt: skip
    configured = compare_runs({BASELINE: base, strategy: scored[StrategySetting(strategy)]},
                              BASELINE, METRIC_NAMES)  # fmt: skip
    return {
        "chosen_per_fold": validated.chosen(),
        "held_out": [c.as_json() for c in held_out],
        "configured": [c.as_json() for c in configured],
        "worse_on": sorted(c.metric for c in held_out if c.verdict == "worse"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument(
        "--kb-suffix", default="",
        help="Score the knowledge bases named SET + this (e.g. -gemma: the same corpora "
        "ingested with another embedder).",
    )  # fmt: skip
    args = parser.parse_args()
    strategies = [s for s in CANDIDATE_STRATEGIES if s != BASELINE]
    figures: dict[str, Any] = {"folds": FOLDS, "chosen_on": "R@5", "kb_suffix": args.kb_suffix,
                               "sets": {}}  # fmt: skip
    with proxy_process({"KGQR_REWRITE_CACHE_TTL_S": "0"}) as proxy:
        for name in DEV_SETS:
            queries = dev_queries(name, args.data)
            settings = candidate_settings([BASELINE, *strategies])
            pacing = {"size": 20, "concurrency": 1, "headers": {}}
            kb = name + args.kb_suffix
            scored = asyncio.run(score_settings(proxy.url, kb, queries, settings, {}, pacing))
            figures["sets"][name] = {s: judged(scored, s) for s in strategies}
    fit = [s for s in strategies
           if not any(figures["sets"][n][s]["worse_on"] for n in DEV_SETS)]  # fmt: skip
    figures["not_worse_on_any_metric_on_both_sets"] = fit
    for name in DEV_SETS:
        for strategy in strategies:
            found = figures["sets"][name][strategy]
            for kind in ("held_out", "configured"):
                shown = comparisons_text(found[kind], SHOWN)
                print(f"{name:>9} {strategy:>10} {kind:>10}  {shown}")
            print(f"{'':>9} {'':>10} chosen per fold: {found['chosen_per_fold']}; "
                  f"held-out worse on: {found['worse_on'] or 'no metric'}")  # fmt: skip
    print(f"not worse than base on any metric on both sets: {fit or 'none: base stays'}")
    save("global-default", figures)


if __name__ == "__main__":
    main()
