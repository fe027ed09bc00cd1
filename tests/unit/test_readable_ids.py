"""Readability checks name every id they ask about, so a large set is split into queries
no larger than the engine's result window (a walk's neighbourhood can name thousands)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from query_rewriter.strategies.vector_lookups import IDS_PER_QUERY, readable_ids

pytestmark = pytest.mark.unit


class Engine:
    """Answers ids queries as DLS would for a caller who may not read odd numbers, and
    refuses one asking for more hits than the result window, as OpenSearch does."""

    def __init__(self, hidden: bool = True, also_in_v2: frozenset[str] = frozenset()) -> None:
        self.sizes: list[int] = []
        self.hidden = hidden
        self.also_in_v2 = also_in_v2  # ids an index added to the alias holds too

    async def search(self, index: str, body: dict[str, Any]) -> dict[str, Any]:
        self.sizes.append(body["size"])
        if body["size"] > IDS_PER_QUERY:
            raise ValueError("Result window is too large")
        ids = body["query"]["ids"]["values"]
        readable = [i for i in ids if not self.hidden or int(i) % 2 == 0]
        hits = [{"_id": i, "_index": "v1"} for i in readable]
        hits += [{"_id": i, "_index": "v2"} for i in ids if i in self.also_in_v2]
        answer: dict[str, Any] = {
            "hits": {"hits": hits[: body["size"]], "total": {"value": len(hits)}}
        }
        if "aggs" in body:
            indices = sorted({hit["_index"] for hit in hits})
            answer["aggregations"] = {"i": {"buckets": [{"key": i} for i in indices]}}
        return answer


def test_a_large_id_set_is_checked_in_result_window_sized_queries() -> None:
    engine = Engine()
    ctx = SimpleNamespace(opensearch=engine)
    ids = {str(n) for n in range(2 * IDS_PER_QUERY + 5)}
    allowed = asyncio.run(readable_ids(ctx, "kb", ids))  # type: ignore[arg-type]
    assert allowed == {i for i in ids if int(i) % 2 == 0}
    # Each chunk counted, then fetched because some of it is hidden.
    assert sorted(engine.sizes) == [0, 0, 0, 5, IDS_PER_QUERY, IDS_PER_QUERY]
    assert asyncio.run(readable_ids(ctx, "kb", set())) == set()  # type: ignore[arg-type]


def test_a_caller_who_may_read_every_id_costs_one_count_per_chunk() -> None:
    engine = Engine(hidden=False)
    ids = {str(n) for n in range(IDS_PER_QUERY + 1)}
    ctx = SimpleNamespace(opensearch=engine)
    assert asyncio.run(readable_ids(ctx, "kb", ids)) == ids  # type: ignore[arg-type]
    assert engine.sizes == [0, 0]


def test_ids_an_alias_finds_in_two_indices_are_none_readable() -> None:
    """An alias attached over one index may name two since: "2" readable in both counted
    twice, and "1" hidden passed for readable (two hits for two ids). An id is then two
    documents, and the graph's edges were read from one: none is taken."""
    engine = Engine(also_in_v2=frozenset({"2"}))
    ctx = SimpleNamespace(opensearch=engine)
    assert asyncio.run(readable_ids(ctx, "kb", {"1", "2"})) == set()  # type: ignore[arg-type]
    one_index = SimpleNamespace(opensearch=Engine())
    assert asyncio.run(readable_ids(one_index, "kb", {"1", "2"})) == {"2"}  # type: ignore[arg-type]
