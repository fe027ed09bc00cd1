"""kgqr's side vectors: packed small enough to read a search's worth by id, and scored as
the engine's cosinesimil k-NN scores, so the hybrid weighs them as it would a k-NN side."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np

from kgqr_core import packed_vectors
from kgqr_core.field_evidence import digest, joined_text
from kgqr_core.settings import Settings
from plugin.field_map import FieldMap
from plugin.kb_meta import DocumentStructure
from query_rewriter.engine.hybrid_query import SearchFields
from query_rewriter.engine.query_text import ParsedQuery
from query_rewriter.search.side_vectors import MOST_CANDIDATES, SideVectorReads, VisibleVectors
from query_rewriter.strategies.context import StrategyContext


def test_a_packed_vector_keeps_its_direction_in_a_third_of_the_json() -> None:
    vector = np.random.default_rng(3).standard_normal(384).astype(np.float32)
    back = packed_vectors.unpack(packed_vectors.pack(vector))
    cosine = back @ vector / (np.linalg.norm(back) * np.linalg.norm(vector))
    assert back.shape == (384,) and cosine > 0.9999
    assert len(packed_vectors.pack(vector)) < len(str(vector.round(6).tolist())) / 3


def test_scores_are_the_engines_cosine_scores_and_none_without_vectors() -> None:
    rows = np.asarray([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], np.float32)
    found = VisibleVectors("kgqr-kb-vectors", 5, ["a", "b", "c"], rows)
    scores = found.scores(np.asarray([2.0, 0.0], np.float32))
    assert scores == {"a": 1.0, "b": 0.5, "c": 0.0}
    assert found.explained() == {"index": "kgqr-kb-vectors", "candidates": 5, "scored": 3}
    assert VisibleVectors("i", 2, [], np.zeros((0, 0), np.float32)).scores(rows[0]) == {}


def test_a_graph_strategys_seeds_are_ranked_by_the_side_vectors_as_base_is() -> None:
    """Seeds from BM25 alone cost `graph` 18.5 MRR on MuSiQue where base ranked with the
    side vectors: the plain hits a strategy starts from read them too."""
    sent: list[dict[str, Any]] = []
    asked: list[tuple[str, int]] = []

    class Caller:
        async def search(
            self, index: str, body: dict[str, Any], params: dict[str, str] | None = None
        ) -> dict[str, Any]:
            sent.append(body)
            return {"hits": {"hits": [{"_id": "d2", "_score": 1.0, "_source": {}}]}}

    async def side(
        parsed: ParsedQuery, searched: SearchFields, vector: np.ndarray, size: int
    ) -> dict[str, float] | None:
        asked.append((parsed.text, size))
        return {"d2": 0.9, "d1": 0.2}

    async def embed(texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), 4), np.float32)

    fields = FieldMap(index="articles", text_fields={"body": 1.0}, side_vector_fields=["body"],
                      vector_model="m", dimension=4)  # fmt: skip
    ctx = StrategyContext(Settings(), "articles", "a", DocumentStructure(), None, Caller(),  # type: ignore[arg-type]
                          embed, fields=fields, side_vectors=side)  # fmt: skip
    hits = asyncio.run(ctx.initial_hits("heat waves", 5))
    assert [hit["id"] for hit in hits] == ["d2"] and asked == [("heat waves", 5)]
    sides = sent[0]["query"]["hybrid"]["queries"]
    weights = {c["constant_score"]["filter"]["ids"]["values"][0]: c["constant_score"]["boost"]
               for c in sides[1]["bool"]["should"]}  # fmt: skip
    assert len(sides) == 2 and weights == {"d2": 0.9, "d1": 0.2}
    # Without side vectors the same index is searched by BM25 alone.
    sent.clear()
    ctx.side_vectors = None
    asyncio.run(ctx.initial_hits("heat waves", 5))
    assert len(sent[0]["query"]["hybrid"]["queries"]) == 1


class StoredVectors:
    """kgqr's side index, as kgqr's account reads it (`_mget`): `stored(id)` each."""

    def __init__(self, stored: Callable[[str], dict[str, Any]]) -> None:
        self.stored = stored
        self.mgets: list[list[str]] = []

    async def send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        ids = kwargs["json"]["ids"]
        self.mgets.append(ids)
        docs = [{"_id": i, "found": True, "_source": self.stored(i)} for i in ids]
        return httpx.Response(200, json={"docs": docs}, request=httpx.Request(method, path))


def _reads(kgqr: StoredVectors) -> tuple[SideVectorReads, SearchFields]:
    fields = FieldMap(index="articles", text_fields={"body": 1.0}, side_vector_fields=["body"],
                      vector_model="m", dimension=2)  # fmt: skip
    reads = SideVectorReads.of(kgqr, "articles", "a", fields, depth=200)  # type: ignore[arg-type]
    assert reads is not None
    return reads, SearchFields.of(fields)


def test_one_search_reads_each_stored_vector_once_for_its_seeds_and_its_ranking() -> None:
    """A graph search on a side-vector KB searches the caller's candidates twice (its seed
    step, then its own ranking, under the caller's filters): the vectors of those both
    found are read once, and each read still shows only what the caller's text vouches for."""
    searches: list[dict[str, Any]] = []
    seen = {"d1": "heat waves", "d2": "changed since embedded", "d3": "cold snaps"}
    answers = {"heat waves": ["d1", "d2"], "cold snaps": ["d3", "d1"]}

    class Caller:
        async def search(
            self, index: str, body: dict[str, Any], params: dict[str, str] | None = None
        ) -> dict[str, Any]:
            searches.append(body)
            ids = answers[body["query"]["multi_match"]["query"]]
            return {"hits": {"hits": [{"_id": i, "_source": {"body": seen[i]}} for i in ids]}}

    def stored(doc_id: str) -> dict[str, Any]:
        made_from = "heat waves" if doc_id == "d2" else seen[doc_id]
        vector = packed_vectors.pack(np.asarray([3.0, 4.0 * int(doc_id[1])], np.float32))
        return {"digest": digest(joined_text({"body": made_from}, ["body"])), "model": "m",
                "vector": vector}  # fmt: skip

    kgqr = StoredVectors(stored)
    mgets = kgqr.mgets
    reads, searched = _reads(kgqr)

    def read(query: str, end: int) -> VisibleVectors | None:
        return asyncio.run(reads.read(Caller(), ParsedQuery(query), searched, end))  # type: ignore[arg-type]

    first = read("heat waves", 5)
    assert first is not None and first.ids == ["d1"]  # d2's text changed since embedded
    assert np.allclose(first.vectors, [[0.6, 0.8]]) and first.candidates == 2
    assert searches[0]["size"] == 200 and mgets == [["d1", "d2"]]
    second = read("cold snaps", 10)
    assert second is not None and second.ids == ["d3", "d1"]
    assert mgets == [["d1", "d2"], ["d3"]]  # d1's vector was read already
    assert read("heat waves", MOST_CANDIDATES + 1) is None and len(searches) == 2
    assert SideVectorReads.of(kgqr, "articles", "a", FieldMap.own("a"), 200) is None  # type: ignore[arg-type]


def test_a_lowered_result_window_bounds_the_candidates_not_the_vector_side() -> None:
    """An index whose window is below the candidates' depth (200 here) refused the
    candidate search, and its searches lost their vector side."""
    sizes: list[int] = []
    refusal = ("Result window is too large, from + size must be less than or equal to: [50] "
               "but was [200].")  # fmt: skip

    class Caller:
        async def search(
            self, index: str, body: dict[str, Any], params: dict[str, str] | None = None
        ) -> dict[str, Any]:
            sizes.append(body["size"])
            if body["size"] > 50:
                request = httpx.Request("POST", "http://e")
                httpx.Response(400, text=refusal, request=request).raise_for_status()
            return {"hits": {"hits": [{"_id": "d1", "_source": {"body": "heat"}}]}}

    vector = packed_vectors.pack(np.asarray([1.0, 0.0], np.float32))
    source = {"digest": digest(joined_text({"body": "heat"}, ["body"])), "model": "m",
              "vector": vector}  # fmt: skip
    reads, searched = _reads(StoredVectors(lambda doc_id: source))
    seen = asyncio.run(reads.read(Caller(), ParsedQuery("heat"), searched, 10))  # type: ignore[arg-type]
    assert seen is not None and seen.ids == ["d1"] and sizes == [200, 50]
    deeper = asyncio.run(reads.read(Caller(), ParsedQuery("heat"), searched, 60))  # type: ignore[arg-type]
    assert deeper is None  # the caller's own page passes the window: the engine's to refuse
