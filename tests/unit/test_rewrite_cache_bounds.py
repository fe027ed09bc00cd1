"""The rewrite cache never fails a search and never takes more than its share of Redis."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

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
