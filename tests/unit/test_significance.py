"""The statistics every comparison of strategies carries, against values worked out
independently: a bootstrap redone by hand on the same seed, an exactly enumerated
bootstrap distribution, and a randomization test enumerated over every sign flip."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from workbench.evaluation.significance import (
    bootstrap_interval,
    compare,
    compare_runs,
    randomization_p_value,
)

DIFFERENCES = np.array([0.2, 0.0, 0.0, 1.0, 0.5, -0.5, 0.0, 0.33, 0.0, 1.0])


def test_the_bootstrap_interval_is_the_percentiles_of_resampled_means() -> None:
    """Redone by hand: 2,000 resamples of the queries drawn with the same seed, each
    resample's mean, and their 2.5th and 97.5th percentiles."""
    drawn = np.random.default_rng(3).integers(0, len(DIFFERENCES), (2000, len(DIFFERENCES)))
    expected = np.percentile(DIFFERENCES[drawn].mean(axis=1), [2.5, 97.5])
    assert bootstrap_interval(DIFFERENCES, resamples=2000, seed=3) == pytest.approx(expected)


def test_the_bootstrap_interval_matches_the_exact_resampling_distribution() -> None:
    """For differences (0, 0, 1) the 27 equally likely resamples have means 0 (8), 1/3
    (12), 2/3 (6) and 1 (1): 2.5% of them fall at 0 and 1/27 > 2.5% at 1, so [0, 1]."""
    assert bootstrap_interval([0.0, 0.0, 1.0]) == (0.0, 1.0)
    assert bootstrap_interval([0.25, 0.25, 0.25]) == (0.25, 0.25)  # nothing varies
    assert bootstrap_interval([0.25]) == (-1.0, 1.0)  # one query: anything a metric allows


@pytest.mark.parametrize(
    "ours, theirs",
    [
        ([1, 1, 1, 0.5, 0.0], [0, 0, 0, 0, 0.5]),
        ([0.2, 0.9, 0.4, 0.4, 1, 0], [0.1, 0.3, 0.5, 0.4, 0, 0]),
    ],
)
def test_the_randomization_test_equals_its_exact_enumeration(
    ours: list[float], theirs: list[float]
) -> None:
    """Every one of the 2^n ways to swap the two strategies' scores per query: the share
    whose mean difference is at least the observed one in size."""
    difference = np.asarray(ours) - np.asarray(theirs)
    observed = abs(difference.mean())
    flips = list(itertools.product((1, -1), repeat=len(difference)))
    extreme = sum(abs((difference * np.asarray(flip)).mean()) >= observed - 1e-12 for flip in flips)
    assert randomization_p_value(theirs, ours) == pytest.approx(extreme / len(flips))
    assert randomization_p_value(theirs, theirs) == 1.0


def test_an_interval_holding_zero_is_not_a_win() -> None:
    base = {f"q{i}": 0.0 for i in range(12)}
    lifted = {**base, "q0": 1.0}  # one question better, eleven the same
    shown = compare("R@5", "graph", lifted, "base", base)
    assert (shown.wins, shown.losses, shown.queries) == (1, 0, 12)
    assert shown.difference == pytest.approx(1 / 12)
    assert shown.low == 0.0 and shown.verdict == "not shown to differ"
    steady = {q: 1.0 for q in base}  # every question better
    assert compare("R@5", "graph", steady, "base", base).verdict == "better"
    assert compare("R@5", "base", base, "graph", steady).verdict == "worse"
    assert "not shown to differ" in shown.as_text() and "+8.3 [+0.0" in shown.as_text()


def test_runs_are_paired_by_query_and_compared_to_the_named_baseline() -> None:
    runs = {
        "base": {"q1": {"MRR": 0.5}, "q2": {"MRR": 1.0}},
        "graph": {"q1": {"MRR": 1.0}, "q2": {"MRR": 1.0}, "q3": {"MRR": 1.0}},
    }
    [compared] = compare_runs(runs, "base", ["MRR"])
    assert (compared.strategy, compared.queries, compared.wins) == ("graph", 2, 1)
    assert compared.difference == pytest.approx(0.25)


def test_an_interval_above_zero_the_randomization_test_does_not_back_is_not_a_win() -> None:
    """Four wins, no loss, six ties of ten: the percentile interval is [+10, +70], but
    only 2^4 sign flips differ, and the exact p-value is 2/16 = 0.125."""
    base = {f"q{i}": 0.0 for i in range(10)}
    lifted = {**base, **{f"q{i}": 1.0 for i in range(4)}}
    shown = compare("R@5", "graph", lifted, "base", base)
    assert shown.low > 0 and shown.p_value == pytest.approx(0.125)
    assert shown.verdict == "not shown to differ"
    assert compare("R@5", "base", base, "graph", lifted).verdict == "not shown to differ"


def test_scores_are_paired_by_query_id_not_by_the_order_they_came_in() -> None:
    """Each side better on one query: no difference, one win and one loss, however each
    side's scores were inserted (sorting either side by score would show a difference)."""
    base = {"q1": 1.0, "q2": 0.0}
    graph = {"q2": 1.0, "q1": 0.0}
    shown = compare("R@5", "graph", graph, "base", base)
    assert shown.difference == 0.0 and (shown.wins, shown.losses) == (1, 1)


def test_a_run_started_at_a_later_llm_draw_is_compared_to_its_own_base() -> None:
    """With KGQR_LLM_SAMPLE=1 every run is labelled from "#2" on, base's too: the report
    looked for a run called "base", found none, and carried no comparison at all."""
    from workbench.evaluation.runner import EvalReport, QueryResult, StrategyReport

    def results(strategy: str, recall: list[float]) -> list[QueryResult]:
        return [QueryResult(f"q{n}", strategy, [], 0.1, {"R@5": r}, sample=1)
                for n, r in enumerate(recall)]  # fmt: skip

    base, graph = results("base", [0.0] * 10), results("graph", [1.0] * 10)
    report = EvalReport(
        {"baseline": "base"},
        [StrategyReport.of("base", base, sample=1), StrategyReport.of("graph", graph, sample=1)],
        [*base, *graph],
    )
    [compared] = report.comparisons(["R@5"])
    assert (compared.strategy, compared.baseline) == ("graph #2", "base #2")
    assert compared.verdict == "better"
