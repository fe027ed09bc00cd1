"""The proxy's ids lookups of an index whose result window a team lowered."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from query_rewriter.strategies.vector_lookups import ids_hits, readable_among

pytestmark = pytest.mark.unit
WINDOW = 2
REFUSAL = (
    "Result window is too large, from + size must be less than or equal to: [2] but was "
    "[5]. See the scroll api for a more efficient way to request large data sets."
)


class Windowed:
    """An index of documents d0..d4 (d3 hidden from this caller), window 2 by default."""

    def __init__(self, window: int = WINDOW) -> None:
        self.sizes: list[int] = []
        self.window = window

    async def search(
        self, index: str, body: dict[str, Any], params: dict[str, str] | None = None
    ) -> dict[str, Any]:
        self.sizes.append(int(body.get("size", 10)))
        if body.get("size", 10) > self.window:
            refusal = REFUSAL.replace("[2]", f"[{self.window}]")
            answer = httpx.Response(400, text=refusal, request=httpx.Request("POST", "http://e"))
            answer.raise_for_status()
        named = [i for i in body["query"]["ids"]["values"] if i != "d3"]
        buckets = [{"key": index}]
        return {"hits": {"total": {"value": len(named)}, "hits": [{"_id": i} for i in named]},
                "aggregations": {"i": {"buckets": buckets}}}  # fmt: skip

    async def msearch(self, index: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        raise NotImplementedError


def test_an_ids_lookup_asks_within_the_window_the_engine_names() -> None:
    """A window of 500 refused a rewrite's lookups of more evidence, and it fell back."""
    index = Windowed()
    ids = [f"d{n}" for n in range(5)]
    hits = asyncio.run(ids_hits(index, "team", ids, {"_source": False}))
    assert [hit["_id"] for hit in hits] == ["d0", "d1", "d2", "d4"]
    assert index.sizes == [5, 2, 2, 1]
    again = Windowed()  # the window is remembered: asked within it, no refusal first
    assert asyncio.run(readable_among(again, "team", ids)) == {"d0", "d1", "d2", "d4"}
    assert again.sizes == [0, 2, 2, 1]  # the count, then the fetch of a chunk with d3
    lowered = Windowed(window=1)  # lowered again since: learnt afresh
    assert len(asyncio.run(ids_hits(lowered, "team", ids, {}))) == 4
    assert lowered.sizes == [2, 5, 1, 1, 1, 1, 1]


def test_any_other_refusal_is_the_engines() -> None:
    class Refusing(Windowed):
        async def search(self, index: str, body: dict[str, Any],
                         params: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
            httpx.Response(403, request=httpx.Request("POST", "http://e")).raise_for_status()
            return {}

    with pytest.raises(httpx.HTTPStatusError):
        asyncio.run(ids_hits(Refusing(), "elsewhere", ["d0", "d1", "d2"], {}))


def test_two_lookups_that_find_the_window_lowered_again_at_once_both_learn_it() -> None:
    """Each forgot the remembered window on its refusal: the second's forgetting was a
    KeyError, and its rewrite fell back."""

    class Yielding(Windowed):
        async def search(self, index: str, body: dict[str, Any],
                         params: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
            await asyncio.sleep(0)  # both lookups are refused before either learns again
            return await super().search(index, body, params)

    ids = [f"d{n}" for n in range(5)]
    asyncio.run(ids_hits(Windowed(), "lowered-twice", ids, {}))  # window 2 remembered

    async def both() -> list[list[dict[str, Any]]]:
        lowered = Yielding(window=1)
        return list(await asyncio.gather(*(ids_hits(lowered, "lowered-twice", ids, {})
                                           for _ in range(2))))  # fmt: skip

    assert [len(hits) for hits in asyncio.run(both())] == [4, 4]
