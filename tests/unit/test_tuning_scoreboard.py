"""The tuning page's scoreboard: which queries count, and the metrics per strategy."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from workbench.tuning.routes import _statistics
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
    # kar against base on the one query both ran: 0.5 more MRR there, one win; but one
    # query is no evidence, so not shown to differ.
    mrr = next(c for c in rows["kar"]["against_base"] if c["metric"] == "MRR")  # type: ignore[attr-defined]
    assert (mrr["queries"], mrr["wins"], mrr["losses"]) == (1, 1, 0)
    assert mrr["difference"] == pytest.approx(0.5)
    assert (mrr["low"], mrr["high"], mrr["verdict"]) == (-1.0, 1.0, "not shown to differ")
    assert rows["base"]["against_base"] == []


def test_nothing_judged_scores_nothing() -> None:
    assert scoreboard([], [ShownRanking("q", "base", ["a"])]) == []


def test_the_pages_statistics_run_off_the_event_loop_one_at_a_time() -> None:
    """The scoreboard's and promote's resamples took seconds on a few thousand judged
    queries, on the event loop where every caller's search waited."""
    running: list[int] = []

    def work() -> int:
        running.append(1)
        concurrent = len(running)
        time.sleep(0.05)
        running.pop()
        return concurrent

    async def run() -> tuple[list[int], int]:
        loop_thread = threading.get_ident()
        found = await asyncio.gather(*(_statistics(work) for _ in range(3)))
        thread = await _statistics(threading.get_ident)
        return list(found), int(thread != loop_thread)

    most, elsewhere = asyncio.run(run())
    assert most == [1, 1, 1] and elsewhere == 1
