"""Ranking metrics against examples worked by hand (the arithmetic is in each comment)."""

from __future__ import annotations

import math

import pytest

from workbench.evaluation.metrics import (
    average_precision,
    hit_at,
    latency_percentiles,
    mean_scores,
    ndcg_at,
    recall_at,
    reciprocal_rank,
    score_query,
)

# d9 is relevant but never retrieved; d3, d5, d4 are unjudged (= not relevant).
RANKED = ["d3", "d1", "d5", "d2", "d4"]
JUDGED = {"d1": 1.0, "d2": 1.0, "d9": 1.0}


def test_hits_and_recall() -> None:
    assert hit_at(RANKED, JUDGED, 1) == 0.0  # d3 is not relevant
    assert hit_at(RANKED, JUDGED, 5) == 1.0
    assert recall_at(RANKED, JUDGED, 2) == pytest.approx(1 / 3)  # d1 of {d1, d2, d9}
    assert recall_at(RANKED, JUDGED, 5) == pytest.approx(2 / 3)  # d1, d2
    assert recall_at(RANKED, JUDGED, 20) == pytest.approx(2 / 3)  # d9 never comes


def test_reciprocal_rank_is_of_the_first_relevant_hit() -> None:
    assert reciprocal_rank(RANKED, JUDGED) == 0.5  # d1 at rank 2
    assert reciprocal_rank(["x", "y"], JUDGED) == 0.0


def test_average_precision_divides_by_all_relevant_documents() -> None:
    # precision at d1 (rank 2) = 1/2, at d2 (rank 4) = 2/4; (0.5 + 0.5) / 3 relevant
    assert average_precision(RANKED, JUDGED) == pytest.approx(1 / 3)
    assert average_precision(["d1", "d2", "d9"], JUDGED) == 1.0


def test_ndcg_binary_and_graded() -> None:
    # DCG = 1/log2(3) + 1/log2(5); ideal = 1 + 1/log2(3) + 1/log2(4)
    expected = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3) + 0.5)
    assert ndcg_at(RANKED, JUDGED, 10) == pytest.approx(expected)
    assert ndcg_at(RANKED, JUDGED, 10) == pytest.approx(0.49819, abs=1e-5)
    # grades a=3 (gain 7), b=1 (gain 1); ranked b, a: (1 + 7/log2 3) / (7 + 1/log2 3)
    assert ndcg_at(["b", "a"], {"a": 3, "b": 1}, 10) == pytest.approx(0.70981, abs=1e-5)


def test_judged_non_relevant_and_empty_judgments_score_zero() -> None:
    assert recall_at(["a"], {"a": 0.0}, 5) == 0.0
    assert score_query(["a", "b"], {}) == dict.fromkeys(score_query(["a"], {}), 0.0)


def test_score_query_names_every_reported_metric() -> None:
    assert set(score_query(RANKED, JUDGED)) == {
        "Hit@1",
        "Hit@5",
        "R@2",
        "R@5",
        "R@10",
        "R@20",
        "MRR",
        "mAP",
        "nDCG@10",
    }


def test_mean_and_latency_percentiles() -> None:
    assert mean_scores([{"MRR": 1.0}, {"MRR": 0.5}]) == {"MRR": 0.75}
    assert mean_scores([]) == {}
    # ranks 0..3 over 0.1..0.4 s: p50 between 0.2 and 0.3; p95 at 2.85 -> 0.3 + 0.85 * 0.1
    figures = latency_percentiles([0.4, 0.1, 0.3, 0.2])
    assert figures["p50_ms"] == pytest.approx(250.0)
    assert figures["p95_ms"] == pytest.approx(385.0)


def test_a_document_ranked_twice_counts_at_its_first_place() -> None:
    """Counted at each place (an alias over two indices holding it), it gave AP 2.0."""
    twice = score_query(["a", "a", "b"], {"a": 1.0})
    assert twice == score_query(["a", "b"], {"a": 1.0})
    assert twice["mAP"] == 1.0 and twice["nDCG@10"] == 1.0
