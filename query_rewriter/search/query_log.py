"""Every rewrite as one document in the query-log index, for OpenSearch Dashboards.

Entries are queued and bulk-written by a background task, so logging adds no round trip
to a search; when OpenSearch cannot keep up the queue drops entries (counted in
``kgqr_query_log_entries_total{result="dropped"}``) rather than holding memory or a search.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
from dataclasses import dataclass
from typing import Any

import httpx

from plugin.schema import QUERY_LOG_INDEX
from query_rewriter import metrics
from query_rewriter.engine.forwarding import answer_content
from query_rewriter.search.explain import Explain

log = logging.getLogger("kgqr.query_log")


@dataclass(frozen=True)
class HitCount:
    """How many hits an answer returned, and its `hits.total`."""

    returned: int = 0
    total: int = 0

    @classmethod
    def of(cls, content: Any) -> HitCount:
        """Read off an answer kgqr already holds decoded: its rewritten answer carries the
        documents' whole `_source`, vectors too (170 KB for ten MuSiQue hits), and decoding
        it again only to count took 2.7 ms a search on the event loop."""
        try:
            found = content["hits"]
            returned = len(found["hits"])
        except (KeyError, TypeError):
            return cls()
        total = found.get("total")  # absent under `track_total_hits: false`
        with contextlib.suppress(KeyError, TypeError, ValueError):
            return cls(returned, int(total["value"] if isinstance(total, dict) else total))
        return cls(returned)

    @classmethod
    def of_response(cls, upstream: httpx.Response) -> HitCount:
        """An answer's counts: read off the content a rewritten answer was written from
        (forwarding.answer_content), else from the engine's bytes."""
        try:
            return cls.of(answer_content(upstream))
        except ValueError:
            return cls()


def query_log_entry(
    *,
    kb: str,
    index: str,
    strategy: str,
    explain: Explain,
    status: int,
    counted: HitCount,
    total_ms: float,
) -> dict[str, Any]:
    """The logged facts of one rewritten search (mapping: plugin/opensearch/query-log)."""
    fallback = explain.get("fallback")
    return {
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        "kb": kb,
        "index": index,
        "strategy": strategy,
        "applied_strategy": explain.get("strategy"),
        "query": explain.get("query"),
        "fell_back": int(fallback is not None),
        "fallback_stage": fallback["stage"] if fallback else None,
        "fallback_reason": fallback["reason"] if fallback else None,
        "rewrite_cached": bool(explain.get("cached")),
        "llm_calls": int(explain.get("llm_calls") or 0),
        "cached_llm_calls": int(explain.get("cached_llm_calls") or 0),
        "status": status,
        "hit_count": counted.returned,
        "total_hits": counted.total,
        "zero_hits": int(not counted.returned),
        "total_ms": round(total_ms, 2),
        "stages_ms": dict(explain.get("stages_ms") or {}),
    }


class QueryLog:
    """A bounded queue of entries and the task that bulk-indexes them."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        flush_interval_s: float = 1.0,
        max_batch: int = 500,
        max_queued: int = 10_000,
    ) -> None:
        self._http = http
        self._flush_interval_s = flush_interval_s
        self._max_batch = max_batch
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=max_queued)
        self._task: asyncio.Task[None] | None = None

    def record(self, entry: dict[str, Any]) -> None:
        try:
            self._queue.put_nowait(entry)
        except asyncio.QueueFull:
            metrics.QUERY_LOG.labels("dropped").inc()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="kgqr-query-log")

    async def close(self) -> None:
        """Stop the writer after indexing what is queued."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._flush_interval_s)
            await self.flush()

    async def flush(self) -> None:
        while not self._queue.empty():
            batch = [
                self._queue.get_nowait() for _ in range(min(self._max_batch, self._queue.qsize()))
            ]
            await self._write(batch)

    async def _write(self, batch: list[dict[str, Any]]) -> None:
        lines = []
        for entry in batch:
            lines += [json.dumps({"index": {"_index": QUERY_LOG_INDEX}}), json.dumps(entry)]
        try:
            response = await self._http.post(
                "/_bulk",
                content=("\n".join(lines) + "\n").encode(),
                headers={"content-type": "application/x-ndjson"},
            )
            items = response.json().get("items", []) if response.status_code == 200 else []
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("query log not written: %s", exc)
            metrics.QUERY_LOG.labels("failed").inc(len(batch))
            return
        failed = sum(1 for item in items if item.get("index", {}).get("status", 500) >= 300)
        failed += len(batch) - len(items)
        if failed:
            log.warning("query log: %d of %d entries not indexed", failed, len(batch))
        metrics.QUERY_LOG.labels("failed").inc(failed)
        metrics.QUERY_LOG.labels("written").inc(len(batch) - failed)
