"""A rewritten answer's hits with the caller's own query's total and aggregations."""

from __future__ import annotations

from typing import Any

import pytest

from query_rewriter.engine.original_facets import with_original_facets
from query_rewriter.engine.shard_health import with_worst_health

pytestmark = pytest.mark.unit

HITS = {"total": {"value": 9, "relation": "eq"}, "hits": [{"_id": "m2"}, {"_id": "m1"}]}


def _answer(**over: Any) -> dict[str, Any]:
    return {"timed_out": False, "_shards": {"total": 2, "successful": 2, "failed": 0},
            "hits": HITS, **over}  # fmt: skip


def test_the_total_and_aggregations_are_the_callers_querys() -> None:
    facets = _answer(hits={"total": {"value": 4, "relation": "eq"}, "hits": []},
                     aggregations={"kinds": {"buckets": []}})  # fmt: skip
    merged = with_original_facets(_answer(aggregations={"stale": {}}), facets)
    assert merged["hits"]["total"]["value"] == 4 and merged["hits"]["hits"] == HITS["hits"]
    assert merged["aggregations"] == {"kinds": {"buckets": []}}
    assert merged["timed_out"] is False and merged["_shards"]["failed"] == 0


def test_a_count_that_timed_out_or_lost_shards_says_so() -> None:
    """The total and buckets came from a request that timed out on a shard, or lost one,
    and the answer (the hybrid request's health) said all was well."""
    failure = {"shard": 1, "index": "kgqr-m-documents", "reason": {"type": "x"}}
    shards = {"total": 2, "successful": 1, "failed": 1, "failures": [failure]}
    partial = _answer(timed_out=True, _shards=shards)
    merged = with_original_facets(_answer(), partial)
    assert merged["timed_out"] is True
    assert merged["_shards"]["failed"] == 1 and merged["_shards"]["failures"] == [failure]


def test_a_part_that_lost_a_shard_the_answer_lost_too_is_counted_once() -> None:
    failure = {"shard": 1, "index": "kgqr-m-documents", "reason": {"type": "x"}}
    lost = _answer(_shards={"total": 2, "successful": 1, "failed": 1, "failures": [failure]})
    merged = with_worst_health(lost, lost, _answer())
    assert merged["_shards"] == {"total": 2, "successful": 1, "failed": 1, "failures": [failure]}
    partial = with_worst_health(_answer(), lost)  # a sub-search fused in kgqr lost it
    assert partial["_shards"]["successful"] == 1 and partial["_shards"]["failed"] == 1
    other = {**failure, "shard": 0}  # two parts lost two shards: both are lost
    both = with_worst_health(lost, _answer(_shards={"total": 2, "successful": 1, "failed": 1,
                                                    "failures": [other]}))  # fmt: skip
    assert both["_shards"]["failed"] == 2 and both["_shards"]["successful"] == 0
    skipped = _answer(_shards={"total": 2, "successful": 2, "skipped": 1, "failed": 0})
    assert with_worst_health(skipped, lost)["_shards"]["successful"] == 1  # skipped succeeded
    wider = _answer(_shards={"total": 5, "successful": 2, "failed": 3, "failures": []})
    assert with_worst_health(_answer(_shards={"total": 1, "successful": 1, "failed": 0}),
                             wider)["_shards"]["successful"] == 0  # fmt: skip
