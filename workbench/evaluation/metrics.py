"""Ranking metrics over one ranked list of document ids and one query's judgments.

Judgments map document id -> grade; a grade above zero is relevant. Unjudged documents
count as not relevant (the usual TREC convention), so a metric never needs the corpus.
Each function scores one query; `mean_scores` averages the per-query dicts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

RECALL_DEPTHS = (2, 5, 10, 20)
HIT_DEPTHS = (1, 5)
NDCG_DEPTH = 10
# Every metric score_query reports, in the order tables show them.
METRIC_NAMES = (
    *(f"Hit@{k}" for k in HIT_DEPTHS),
    *(f"R@{k}" for k in RECALL_DEPTHS),
    "MRR",
    "mAP",
    f"nDCG@{NDCG_DEPTH}",
)


def relevant_ids(judgments: Mapping[str, float]) -> set[str]:
    return {doc for doc, grade in judgments.items() if grade > 0}


def hit_at(ranked: Sequence[str], judgments: Mapping[str, float], k: int) -> float:
    relevant = relevant_ids(judgments)
    return 1.0 if any(doc in relevant for doc in ranked[:k]) else 0.0


def recall_at(ranked: Sequence[str], judgments: Mapping[str, float], k: int) -> float:
    relevant = relevant_ids(judgments)
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranked[:k])) / len(relevant)


def reciprocal_rank(ranked: Sequence[str], judgments: Mapping[str, float]) -> float:
    relevant = relevant_ids(judgments)
    for position, doc in enumerate(ranked, start=1):
        if doc in relevant:
            return 1.0 / position
    return 0.0


def average_precision(ranked: Sequence[str], judgments: Mapping[str, float]) -> float:
    """Precision at each relevant hit, summed, over all relevant documents (retrieved or
    not), so a run that misses half the relevant set cannot score above 0.5."""
    relevant = relevant_ids(judgments)
    if not relevant:
        return 0.0
    found, total = 0, 0.0
    for position, doc in enumerate(ranked, start=1):
        if doc in relevant:
            found += 1
            total += found / position
    return total / len(relevant)


def ndcg_at(ranked: Sequence[str], judgments: Mapping[str, float], k: int) -> float:
    """Graded: gain 2^grade - 1, log2 discount; ideal = the judged grades sorted."""

    def dcg(grades: Iterable[float]) -> float:
        return sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(grades))

    ideal = dcg(sorted((g for g in judgments.values() if g > 0), reverse=True)[:k])
    if ideal == 0:
        return 0.0
    return dcg(max(judgments.get(doc, 0.0), 0.0) for doc in ranked[:k]) / ideal


def score_query(ranked: Sequence[str], judgments: Mapping[str, float]) -> dict[str, float]:
    """Every reported metric for one query, as fractions in [0, 1]. A document ranked
    twice (an alias over two indices holding it) counts at its first place only: counted
    again, it gave AP 2.0 and nDCG 1.6."""
    ranked = list(dict.fromkeys(ranked))
    scores = {f"Hit@{k}": hit_at(ranked, judgments, k) for k in HIT_DEPTHS}
    scores.update({f"R@{k}": recall_at(ranked, judgments, k) for k in RECALL_DEPTHS})
    scores["MRR"] = reciprocal_rank(ranked, judgments)
    scores["mAP"] = average_precision(ranked, judgments)
    scores[f"nDCG@{NDCG_DEPTH}"] = ndcg_at(ranked, judgments, NDCG_DEPTH)
    return scores


def mean_scores(per_query: Sequence[Mapping[str, float]]) -> dict[str, float]:
    if not per_query:
        return {}
    return {name: float(np.mean([q[name] for q in per_query])) for name in per_query[0]}


def latency_percentiles(seconds: Sequence[float]) -> dict[str, float]:
    """p50 and p95 in milliseconds (linear interpolation between ranks)."""
    if not seconds:
        return {"p50_ms": 0.0, "p95_ms": 0.0}
    p50, p95 = np.percentile(np.asarray(seconds) * 1000, [50, 95])
    return {"p50_ms": float(p50), "p95_ms": float(p95)}
