"""Neighbourhoods read from the graph's copy in OpenSearch (ingest/graph_projection.py):
one `_mget` of the seeds' documents and one of their neighbours', as kgqr's own account.

The rows are the ones store.NEIGHBOURS returns, so every strategy reads them unchanged
and the evidence a caller must be able to read is checked as for Neo4j's. The copy holds a
node's first `edges` edges in Neo4j's expansion order, and a search takes the first
`cap`. A second hop skips the seed before the cap, as NEIGHBOURS does; where the edges
back to the seed leave fewer than `cap` others among those kept while the node has more,
the copy cannot tell which Neo4j would give, and the expansion is read from Neo4j.
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


class CopyCannotAnswer(Exception):
    """The copy cannot give this expansion as Neo4j would: Neo4j answers it."""


def _edges(
    document: Mapping[str, Any] | None, limit: int, kept_at_most: int, skip: str | None = None
) -> list[Any]:
    """The first `limit` edges of a node's document other than those to `skip`, as
    [other end, its type, relation, outgoing, evidence]. `kept_at_most`: the edges the
    copy keeps a node; a full list that `skip` leaves short of `limit` raises."""
    if document is None:
        return []
    columns = document["edges"]
    edges = list(
        zip(columns["n"], columns["t"], columns["r"], columns["o"], columns["e"], strict=True)
    )
    kept = [edge for edge in edges if edge[0] != skip][:limit]
    if len(kept) < limit and len(edges) >= kept_at_most and len(kept) < len(edges):
        raise CopyCannotAnswer(f"{document.get('id')!r} has more edges back to {skip!r}")
    return kept


def neighbourhood_rows(
    seeds: Sequence[str],
    first: Mapping[str, Mapping[str, Any]],
    second: Mapping[str, Mapping[str, Any]],
    hops: int,
    cap: int,
    kept_at_most: int,
) -> list[list[Any]]:
    """NEIGHBOURS' rows from node documents: `first` the seeds', `second` their neighbours'.
    A first hop's name and type are its own document's (an edge's copy of the type was
    written with the edge); names of second hops are not read: only `kar_no_drf` asks,
    and it reads Neo4j."""
    rows = []
    for seed in seeds:
        for other, kind, relation, outgoing, evidence in _edges(first.get(seed), cap, cap):
            near = second.get(other)
            further = (
                [[n, t, r, o, None, e] for n, t, r, o, e in _edges(near, cap, kept_at_most, seed)]
                if hops >= 2
                else []
            )
            name, kind = (near.get("name"), near.get("type")) if near is not None else (None, kind)
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
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            log.warning("graph copy of %s unreadable (%s): expanding in Neo4j", kb, exc)
        self._known[kb] = _Known(edges, now)
        return edges

    async def neighbours(
        self, kb: str, seeds: list[str], hops: int, cap: int
    ) -> Neighbourhood | None:
        """Everything within `hops` (at most 2) of the seeds; None where the copy cannot
        answer as Neo4j would (none complete, a cap it keeps too few edges for, a failed
        or malformed read)."""
        edges = await self.edges(kb)
        if edges is None or cap >= edges or hops > 2:
            return None
        try:
            first = await self._documents(kb, seeds)
            reached = {edge[0] for seed in seeds for edge in _edges(first.get(seed), cap, cap)}
            second = await self._documents(kb, sorted(reached)) if reached else {}
            rows = neighbourhood_rows(seeds, first, second, hops, cap, edges)
        except CopyCannotAnswer as exc:
            log.info("graph copy of %s: %s; expanding in Neo4j", kb, exc)
            return None
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            log.warning("graph copy of %s unreadable (%s): expanding in Neo4j", kb, exc)
            self._known[kb] = _Known(None, time.monotonic())
            return None
        return Neighbourhood(frozenset(seeds), with_evidence(rows), SOURCE)

    async def _documents(self, kb: str, ids: list[str]) -> dict[str, dict[str, Any]]:
        """The nodes' documents by node id (those the copy has); a document the engine
        could not read (a failed shard) fails the read rather than look like no edges."""
        response = await self._service().send(
            "POST",
            f"/{schema.graph_index(kb)}/_mget",
            json={"ids": [schema.graph_copy_id(node) for node in ids]},
        )
        response.raise_for_status()
        found = {}
        for node, doc in zip(ids, response.json()["docs"], strict=True):
            if "error" in doc:
                raise ValueError(f"the copy's document of {node!r}: {doc['error']}")
            if doc.get("found"):
                found[node] = doc["_source"]
        return found
