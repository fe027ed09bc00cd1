"""Each strategy's metrics over the saved judgments, from the rankings the tuning page
showed (so the scoreboard never re-runs an LLM strategy)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from workbench.evaluation.metrics import mean_scores, relevant_ids, score_query


@dataclass(frozen=True)
class Judgment:
    query: str
    doc_id: str
    grade: float


@dataclass(frozen=True)
class ShownRanking:
    query: str
    strategy: str
    ranked: list[str]


def grades_by_query(judgments: Iterable[Judgment]) -> dict[str, dict[str, float]]:
    """query -> document id -> grade (a later judgment of the same pair wins)."""
    by_query: dict[str, dict[str, float]] = defaultdict(dict)
    for judgment in judgments:
        by_query[judgment.query][judgment.doc_id] = judgment.grade
    return by_query


def scoreboard(
    judgments: Iterable[Judgment], rankings: Iterable[ShownRanking]
) -> list[dict[str, object]]:
    """One row per strategy: the number of scored queries and the mean metrics.

    A query counts once it has at least one relevant judgment (recall and AP are undefined
    without one); documents judged non-relevant and unjudged ones both count as misses.
    """
    by_query = grades_by_query(judgments)
    scored = {query: graded for query, graded in by_query.items() if relevant_ids(graded)}
    per_strategy: dict[str, list[dict[str, float]]] = defaultdict(list)
    for ranking in rankings:
        if ranking.query in scored:
            per_strategy[ranking.strategy].append(
                score_query(ranking.ranked, scored[ranking.query])
            )
    return [
        {"strategy": strategy, "queries": len(scores), "metrics": mean_scores(scores)}
        for strategy, scores in sorted(per_strategy.items())
    ]
