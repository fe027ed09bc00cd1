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

    def __init__(self, hidden: bool = True) -> None:
        self.sizes: list[int] = []
        self.hidden = hidden

    async def search(self, index: str, body: dict[str, Any]) -> dict[str, Any]:
        self.sizes.append(body["size"])
        if body["size"] > IDS_PER_QUERY:
            raise ValueError("Result window is too large")
        ids = body["query"]["ids"]["values"]
        hits = [{"_id": i} for i in ids if not self.hidden or int(i) % 2 == 0]
        return {"hits": {"hits": hits[: body["size"]], "total": {"value": len(hits)}}}


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
