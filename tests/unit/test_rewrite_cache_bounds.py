"""The rewrite cache never fails a search and never takes more than its share of Redis."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from query_rewriter import metrics
from query_rewriter.search.cache import RewriteCache

pytestmark = pytest.mark.unit


class DictRedis:
    """Just enough of redis.asyncio's get/set for the cache, over a dict."""

    def __init__(self, **entries: bytes) -> None:
        self.entries: dict[str, Any] = dict(entries)

    async def get(self, key: str) -> Any:
        return self.entries.get(key)

    async def set(self, key: str, value: str, ex: int) -> None:
        self.entries[key] = value.encode()


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b"\xff\xfe", b'"text"'])
def test_a_corrupt_entry_is_a_miss(raw: bytes) -> None:
    cache = RewriteCache(DictRedis(k=raw), ttl_s=60)
    assert asyncio.run(cache.get("k")) is None


def test_an_entry_over_the_size_cap_is_not_stored() -> None:
    redis = DictRedis()
    cache = RewriteCache(redis, ttl_s=60, max_entry_bytes=100)
    asyncio.run(cache.put("small", {"q": "x"}))
    asyncio.run(cache.put("large", {"q": "x" * 200}))
    assert set(redis.entries) == {"small"}
    assert asyncio.run(cache.get("small")) == {"q": "x"}


def test_the_code_version_covers_the_prompts_and_the_llm_client() -> None:
    """A changed prompt or answer parser must never serve rewrites cached before it."""
    from query_rewriter.search.cache import versioned_files

    names = {name for name, _ in versioned_files()}
    assert {"kgqr_core/prompts/hyde.txt", "kgqr_core/llm.py",
            "query_rewriter/strategies/knowledge/kar.py", "plugin/schema.py"} <= names  # fmt: skip


def test_an_outage_is_a_miss_told_once_a_minute_not_per_search(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Counted as misses, an outage was told nowhere; told per search, it would flood."""

    class DownRedis:
        async def get(self, key: str) -> Any:
            raise ConnectionError("Redis is down")

        async def set(self, key: str, value: str, ex: int) -> None:
            raise ConnectionError("Redis is down")

    cache = RewriteCache(DownRedis(), ttl_s=60)

    async def twice() -> None:
        assert await cache.get("k") is None
        await cache.put("k", {"q": "x"})
        assert await cache.get("k") is None

    counted = metrics.CACHE_UNAVAILABLE._value.get()
    with caplog.at_level("WARNING", logger="kgqr.proxy"):
        asyncio.run(twice())
    assert metrics.CACHE_UNAVAILABLE._value.get() == counted + 3  # every failure counted
    assert [r.getMessage() for r in caplog.records] == [
        "rewrite cache unavailable: rewrites are made afresh"
    ]
    assert "Redis is down" in caplog.records[0].kgqr["error"]  # type: ignore[attr-defined]
