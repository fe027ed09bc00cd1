"""Neighbourhoods read from the graph's copy in OpenSearch (ingest/graph_projection.py):
one `_mget` of the seeds' documents and one of their neighbours', as kgqr's own account.

The rows are the ones store.NEIGHBOURS returns, so every strategy reads them unchanged
and the evidence a caller must be able to read is checked as for Neo4j's. The copy holds a
node's first `edges` edges in Neo4j's expansion order, and a search takes the first
`cap`; a second hop skips the seed before the cap, as NEIGHBOURS does, which needs one
spare edge (hence `cap` < `edges`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from plugin import schema
from query_rewriter.engine.gateway import EngineSession
from query_rewriter.graph.store import Neighbourhood, with_evidence

log = logging.getLogger("kgqr.graph")
SOURCE = "opensearch"


def _edges(document: Mapping[str, Any] | None, limit: int, skip: str | None = None) -> list[Any]:
    """The first `limit` edges of a node's document other than those to `skip`, as
    [other end, its type, relation, outgoing, evidence]."""
    if document is None:
        return []
    columns = document["edges"]
    kept = []
    for edge in zip(
        columns["n"], columns["t"], columns["r"], columns["o"], columns["e"], strict=True
    ):
        if edge[0] != skip:
            kept.append(edge)
            if len(kept) == limit:
                break
    return kept


def neighbourhood_rows(
    seeds: Sequence[str],
    first: Mapping[str, Mapping[str, Any]],
    second: Mapping[str, Mapping[str, Any]],
    hops: int,
    cap: int,
) -> list[list[Any]]:
    """NEIGHBOURS' rows from node documents: `first` the seeds', `second` their neighbours'
    (names of second hops are not read: only `kar_no_drf` asks, and it reads Neo4j)."""
    rows = []
    for seed in seeds:
        for other, kind, relation, outgoing, evidence in _edges(first.get(seed), cap):
            near = second.get(other)
            further = (
                [[n, t, r, o, None, e] for n, t, r, o, e in _edges(near, cap, skip=seed)]
                if hops >= 2
                else []
            )
            name = near.get("name") if near is not None else None
            rows.append([seed, relation, outgoing, other, name, kind, further, evidence])
    return rows


@dataclass
class _Known:
    edges: int | None  # the copy's edges a node, None: no complete copy
    looked_at: float


class ProjectedGraph:
    """The KB's copy in OpenSearch, when it is complete. Whether it is, and its edges a
    node, are read from its mapping at most every `check_s` seconds per KB."""

    def __init__(self, service: Callable[[], EngineSession], check_s: float) -> None:
        self._service = service
        self._check_s = check_s
        self._known: dict[str, _Known] = {}

    async def edges(self, kb: str) -> int | None:
        """The edges a node keeps in the KB's complete copy; None: it has none."""
        known = self._known.get(kb)
        now = time.monotonic()
        if known is not None and now - known.looked_at < self._check_s:
            return known.edges
        edges = None
        try:
            response = await self._service().send("GET", f"/{schema.graph_index(kb)}/_mapping")
            if response.status_code == 200:
                (mapping,) = response.json().values()
                copy = schema.GraphCopyState.of_mapping(mapping["mappings"])
                edges = copy.edges if copy is not None and copy.complete else None
            elif response.status_code != 404:
                log.warning(
                    "graph copy of %s unreadable (%d): expanding in Neo4j",
                    kb, response.status_code,
                )  # fmt: skip
        except httpx.HTTPError as exc:
            log.warning("graph copy of %s unreadable (%s): expanding in Neo4j", kb, exc)
        self._known[kb] = _Known(edges, now)
        return edges

    async def neighbours(
        self, kb: str, seeds: list[str], hops: int, cap: int
    ) -> Neighbourhood | None:
        """Everything within `hops` (at most 2) of the seeds; None where the copy cannot
        answer (none complete, a cap it keeps too few edges for, a failed read)."""
        edges = await self.edges(kb)
        if edges is None or cap >= edges or hops > 2:
            return None
        try:
            first = await self._documents(kb, seeds)
            reached = {edge[0] for seed in seeds for edge in _edges(first.get(seed), cap)}
            second = await self._documents(kb, sorted(reached)) if reached else {}
        except httpx.HTTPError as exc:
            log.warning("graph copy of %s unreadable (%s): expanding in Neo4j", kb, exc)
            self._known[kb] = _Known(None, time.monotonic())
            return None
        rows = neighbourhood_rows(seeds, first, second, hops, cap)
        return Neighbourhood(frozenset(seeds), with_evidence(rows), SOURCE)

    async def _documents(self, kb: str, ids: list[str]) -> dict[str, dict[str, Any]]:
        response = await self._service().send(
            "POST", f"/{schema.graph_index(kb)}/_mget", json={"ids": ids}
        )
        response.raise_for_status()
        return {doc["_id"]: doc["_source"] for doc in response.json()["docs"] if doc.get("found")}
