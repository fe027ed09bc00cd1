"""The tuning page's scoreboard: which queries count, and the metrics per strategy."""

from __future__ import annotations

import pytest

from workbench.tuning.scoreboard import Judgment, ShownRanking, scoreboard


def test_strategies_are_scored_on_queries_with_a_relevant_judgment() -> None:
    judgments = [
        Judgment("q1", "a", 1.0),
        Judgment("q1", "b", 0.0),
        Judgment("q2", "x", 0.0),  # nothing relevant: q2 cannot be scored yet
        Judgment("q3", "c", 1.0),
    ]
    rankings = [
        ShownRanking("q1", "base", ["b", "a"]),
        ShownRanking("q1", "kar", ["a", "b"]),
        ShownRanking("q2", "base", ["x"]),
        ShownRanking("q3", "base", ["c"]),
        ShownRanking("q4", "base", ["z"]),  # never judged
    ]
    rows = {row["strategy"]: row for row in scoreboard(judgments, rankings)}
    assert rows["base"]["queries"] == 2
    assert rows["base"]["metrics"]["MRR"] == pytest.approx((0.5 + 1.0) / 2)  # type: ignore[index]
    assert rows["kar"]["queries"] == 1
    assert rows["kar"]["metrics"]["Hit@1"] == 1.0  # type: ignore[index]


def test_nothing_judged_scores_nothing() -> None:
    assert scoreboard([], [ShownRanking("q", "base", ["a"])]) == []
