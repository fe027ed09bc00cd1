"""Judgments and shown rankings in OpenSearch (indices kgqr-judgments, kgqr-tune-runs).

Document ids are hashes of what identifies a judgment (kb, query, document) or a ranking
(kb, query, strategy), so judging again or re-running a comparison overwrites instead of
piling up duplicates. Requests carry the caller's headers: a tenant reads and writes
judgments with its own permissions.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

from plugin.schema import JUDGMENTS_INDEX, TUNE_RUNS_INDEX
from query_rewriter.engine.gateway import EngineSession
from workbench.tuning.scoreboard import Judgment, ShownRanking

MAX_STORED = 10_000  # one page of a search; a tuning session stays far below it


def _doc_id(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:40]


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


class JudgmentStore:
    def __init__(self, session: EngineSession) -> None:
        self._session = session

    async def _put(self, index: str, doc_id: str, doc: dict[str, Any]) -> None:
        response = await self._session.send(
            "PUT",
            f"/{index}/_doc/{doc_id}",
            params={"refresh": "wait_for"},
            json={**doc, "timestamp": _now()},
        )
        response.raise_for_status()

    async def _all(self, index: str, kb: str, query: str | None = None) -> list[dict[str, Any]]:
        filters: list[dict[str, Any]] = [{"term": {"kb": kb}}]
        if query is not None:
            filters.append({"term": {"query": query}})
        response = await self._session.send(
            "POST",
            f"/{index}/_search",
            json={"size": MAX_STORED, "query": {"bool": {"filter": filters}}},
        )
        if response.status_code == 404:  # nothing judged yet: the index does not exist
            return []
        response.raise_for_status()
        return [hit["_source"] for hit in response.json()["hits"]["hits"]]

    async def judge(self, kb: str, query: str, doc_id: str, grade: float) -> None:
        doc = {"kb": kb, "query": query, "doc_id": doc_id, "grade": grade}
        await self._put(JUDGMENTS_INDEX, _doc_id(kb, query, doc_id), doc)

    async def record_ranking(
        self, kb: str, query: str, strategy: str, ranked: list[str], total_ms: float
    ) -> None:
        doc = {
            "kb": kb,
            "query": query,
            "strategy": strategy,
            "ranked": ranked,
            "total_ms": total_ms,
        }
        await self._put(TUNE_RUNS_INDEX, _doc_id(kb, query, strategy), doc)

    async def judgments(self, kb: str, query: str | None = None) -> list[Judgment]:
        return [
            Judgment(d["query"], d["doc_id"], float(d["grade"]))
            for d in await self._all(JUDGMENTS_INDEX, kb, query)
        ]

    async def rankings(self, kb: str) -> list[ShownRanking]:
        return [
            ShownRanking(d["query"], d["strategy"], list(d["ranked"]))
            for d in await self._all(TUNE_RUNS_INDEX, kb)
        ]
