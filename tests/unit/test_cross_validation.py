"""Cross-validated choice of a setting: chosen on the training folds, scored only on the
held-out one."""

from __future__ import annotations

import pytest

from workbench.evaluation.cross_validation import Candidate, cross_validate, folds_of

QUERIES = [f"q{i}" for i in range(10)]


def test_folds_deal_every_query_once_and_do_not_depend_on_order() -> None:
    folds = folds_of(QUERIES, 3, seed=1)
    assert sorted(q for fold in folds for q in fold) == sorted(QUERIES)
    assert sorted(len(fold) for fold in folds) == [3, 3, 4]
    assert folds_of(list(reversed(QUERIES)), 3, seed=1) == folds
    with pytest.raises(ValueError, match="folds need"):
        folds_of(QUERIES[:2], 3)


def test_each_fold_scores_the_choice_of_the_others_never_its_own() -> None:
    """`lucky` wins overall only through q0, which it answers and `steady` misses; on the
    fold holding q0, the other folds tie the two and the default (listed first) is chosen,
    so q0's held-out score is steady's 0, not lucky's 1."""
    steady = Candidate("steady", {q: {"R@5": 0.5} for q in QUERIES} | {"q0": {"R@5": 0.0}})
    lucky = Candidate("lucky", {q: {"R@5": 0.5} for q in QUERIES} | {"q0": {"R@5": 1.0}})
    validated = cross_validate([steady, lucky], "R@5", k=5)
    fold_of_q0 = next(fold for fold in validated.folds if "q0" in fold.held_out)
    assert fold_of_q0.chosen == "steady"
    assert validated.per_query["q0"]["R@5"] == 0.0
    assert all(fold.chosen == "lucky" for fold in validated.folds if fold is not fold_of_q0)
    assert validated.chosen() == {"steady": 1, "lucky": 4}
    assert validated.mean("R@5") == pytest.approx(0.45)  # below either candidate's overall


def test_candidates_must_score_the_same_queries() -> None:
    one = Candidate("a", {"q1": {"MRR": 1.0}, "q2": {"MRR": 1.0}})
    other = Candidate("b", {"q1": {"MRR": 1.0}})
    with pytest.raises(ValueError, match="other queries"):
        cross_validate([one, other], "MRR", k=2)
