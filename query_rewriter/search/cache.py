"""Rewrites cached in Redis, per caller, and identical concurrent rewrites done once.

The key holds the caller's identity as OpenSearch resolves it (query_rewriter/engine/caller.py), so
one tenant's rewrite (which may quote documents only that tenant can read) is never served
to another.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

import kgqr_core
import plugin
import query_rewriter
from kgqr_core.outage_notice import OutageNotice
from kgqr_core.single_flight import SingleFlight
from query_rewriter import metrics

T = TypeVar("T")
PREFIX = "kgqr:rewrite:"
log = logging.getLogger("kgqr.proxy")


@lru_cache(maxsize=1)
def code_version() -> str:
    """A digest of kgqr's own code and prompt templates. A rewrite cached by one version of
    kgqr is never served by another, so a fixed parser or prompt shows at once instead of
    after the cache TTL; the LLM's answers stay cached by prompt, so recomputing is cheap."""
    digest = hashlib.sha256()
    for name, path in versioned_files():
        digest.update(name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def versioned_files() -> list[tuple[str, Path]]:
    """The code and prompt files a rewrite depends on, by repository path."""
    files = []
    for package in (kgqr_core, plugin, query_rewriter):
        root = Path(str(package.__file__)).parent
        for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".txt")):
            files.append((str(path.relative_to(root.parent)), path))
    return files


def rewrite_key(caller: str, index: str, strategy: str, config: dict[str, Any], query: str) -> str:
    versioned = {"config": config, "code": code_version()}
    config_hash = hashlib.sha256(json.dumps(versioned, sort_keys=True).encode()).hexdigest()[:16]
    # A lone surrogate ("\ud800", which JSON may escape) is no UTF-8: the strict codec's
    # error was the search's 500.
    query_hash = hashlib.sha256(query.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{PREFIX}{caller}:{index}:{strategy}:{config_hash}:{query_hash}"


class RewriteCache:
    """A TTL of 0 or less turns the cache off (evaluation measures real rewrites), while
    concurrent identical rewrites are still coalesced."""

    def __init__(self, redis: Any, ttl_s: int, max_entry_bytes: int = 256 * 1024) -> None:
        self._redis = redis
        self._ttl_s = ttl_s
        self._max_entry_bytes = max_entry_bytes
        self._in_flight: SingleFlight[Any] = SingleFlight()
        self._outage = OutageNotice(log, "rewrite cache unavailable: rewrites are made afresh")

    async def get(self, key: str) -> dict[str, Any] | None:
        if self._ttl_s <= 0:
            return None
        try:
            raw = await self._redis.get(key)
        except Exception as exc:  # an outage is a miss, never a failed search
            self._unavailable(exc)
            return None
        try:
            value = json.loads(raw) if raw else None
        except ValueError:  # a corrupt entry: a miss, made afresh and written over
            return None
        return value if isinstance(value, dict) else None

    def _unavailable(self, exc: Exception) -> None:
        """Counted as misses, an outage was told nowhere: every rewrite made afresh, and
        no line saying why."""
        metrics.CACHE_UNAVAILABLE.inc()
        self._outage.tell(exc)

    async def put(self, key: str, value: dict[str, Any]) -> None:
        if self._ttl_s <= 0:
            return
        encoded = json.dumps(value)
        if len(encoded) > self._max_entry_bytes:
            return
        try:
            await self._redis.set(key, encoded, ex=self._ttl_s)
        except Exception as exc:  # a cache outage must not fail the search
            self._unavailable(exc)

    async def coalesce(self, key: str, compute: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """Run compute once per key at a time; concurrent callers share its result.
        Returns (result, shared) where shared is True for callers that waited."""
        return await self._in_flight.run(key, compute)
