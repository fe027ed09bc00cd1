"""Choosing a setting on some queries and scoring it on others.

A setting picked by looking at every dev question, even one checked on both halves, did
not carry over to unseen questions. So a sweep (and `kgqr tune auto`) picks, on each of k
folds, the candidate that scores best on the other k-1 folds, and scores that choice on the
held-out fold only. The held-out scores of the k choices, one per query, are what a sweep
reports and what is compared, query by query, to the baseline: an honest estimate of how
the selection procedure does on questions it did not see.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_FOLDS = 5

PerQuery = Mapping[str, Mapping[str, float]]  # query id -> metric -> score


@dataclass(frozen=True)
class Candidate:
    """One setting (a strategy with its parameters) and its scores on every query."""

    name: str
    per_query: PerQuery


@dataclass(frozen=True)
class FoldChoice:
    fold: int
    chosen: str
    training_score: float  # its mean metric over the other folds' queries
    held_out: tuple[str, ...]  # this fold's query ids


@dataclass(frozen=True)
class CrossValidated:
    """The held-out scores of the setting each fold chose, one per query."""

    metric: str
    folds: list[FoldChoice]
    per_query: dict[str, dict[str, float]]

    def mean(self, metric: str) -> float:
        return mean_of(self.per_query, metric)

    def chosen(self) -> dict[str, int]:
        """How many folds chose each setting: a procedure that picks the same one on every
        fold is stable; one that changes its mind fold to fold is picking noise."""
        counts: dict[str, int] = {}
        for fold in self.folds:
            counts[fold.chosen] = counts.get(fold.chosen, 0) + 1
        return counts


def folds_of(query_ids: Sequence[str], k: int, seed: int = 0) -> list[tuple[str, ...]]:
    """`query_ids` shuffled with `seed` and dealt into k folds of near-equal size (the
    same split for the same ids and seed, whatever order they came in)."""
    if not 2 <= k <= len(query_ids):
        raise ValueError(f"{k} folds need between 2 and {len(query_ids)} queries' worth")
    ordered = sorted(query_ids)
    shuffled = [ordered[i] for i in np.random.default_rng(seed).permutation(len(ordered))]
    return [tuple(shuffled[fold::k]) for fold in range(k)]


def mean_of(per_query: PerQuery, metric: str, queries: Iterable[str] | None = None) -> float:
    """The mean `metric` over `queries` (all of them by default)."""
    chosen = per_query if queries is None else queries
    return float(np.mean([per_query[q][metric] for q in chosen]))


def cross_validate(
    candidates: Sequence[Candidate], metric: str, k: int = DEFAULT_FOLDS, seed: int = 0
) -> CrossValidated:
    """On each fold, the candidate with the best mean `metric` on the other folds (the
    first listed on a tie: list the default first), scored on that fold. Every candidate
    must have scored the same queries."""
    queries = sorted(candidates[0].per_query)
    for candidate in candidates:
        if sorted(candidate.per_query) != queries:
            raise ValueError(f"{candidate.name} scored other queries than {candidates[0].name}")
    choices, held_out_scores = [], {}
    for number, fold in enumerate(folds_of(queries, k, seed)):
        training = [q for q in queries if q not in set(fold)]
        means = [mean_of(candidate.per_query, metric, training) for candidate in candidates]
        best = int(np.argmax(means))  # the first of equals
        choices.append(FoldChoice(number, candidates[best].name, means[best], fold))
        held_out_scores.update({q: dict(candidates[best].per_query[q]) for q in fold})
    return CrossValidated(metric, choices, held_out_scores)
