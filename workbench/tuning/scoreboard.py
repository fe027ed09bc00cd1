"""Each strategy's metrics over the saved judgments, from the rankings the tuning page
showed (so the scoreboard never re-runs an LLM strategy)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from workbench.evaluation.metrics import mean_scores, relevant_ids, score_query
from workbench.evaluation.significance import compare_runs

BASELINE = "base"
COMPARED = ("R@5", "MRR", "nDCG@10")  # what the page shows against base


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


def scored_rankings(
    judgments: Iterable[Judgment], rankings: Iterable[ShownRanking]
) -> dict[str, dict[str, dict[str, float]]]:
    """Strategy -> query -> the metrics of the ranking shown for it (the last one shown).

    A query counts once it has at least one relevant judgment (recall and AP are undefined
    without one); documents judged non-relevant and unjudged ones both count as misses.
    """
    by_query = grades_by_query(judgments)
    scored = {query: graded for query, graded in by_query.items() if relevant_ids(graded)}
    per_strategy: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for ranking in rankings:
        if ranking.query in scored:
            per_strategy[ranking.strategy][ranking.query] = score_query(
                ranking.ranked, scored[ranking.query]
            )
    return per_strategy


def scoreboard(
    judgments: Iterable[Judgment], rankings: Iterable[ShownRanking]
) -> list[dict[str, object]]:
    """One row per strategy: the number of scored queries, the mean metrics, and (for
    every strategy but base) its paired comparison to base on the queries both ran."""
    per_strategy = scored_rankings(judgments, rankings)
    against: dict[str, list[dict[str, object]]] = defaultdict(list)
    if BASELINE in per_strategy:
        for compared in compare_runs(per_strategy, BASELINE, COMPARED):
            against[compared.strategy].append(compared.as_json())
    return [
        {
            "strategy": strategy,
            "queries": len(scores),
            "metrics": mean_scores(list(scores.values())),
            "against_base": against.get(strategy, []),
        }
        for strategy, scores in sorted(per_strategy.items())
    ]
