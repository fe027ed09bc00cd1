"""Ranking an attached index that has no vectors by kgqr's own (kgqr-KB-vectors, made by
`kgqr kb embed`), without letting them show a caller more than their own search does.

The caller's own search gives the candidates: their matches, best first by BM25, down to
the hybrid's depth, with the fields the vectors were made from. kgqr reads its vectors of
those documents only, by id with its own account (the side index is kgqr's, like the
graph's copy), and a vector counts only where the caller's fetch shows the very text it
was made from. A field hidden from the caller (field-level security), masked, or changed
since it was embedded leaves that document without a vector score. So the vectors
re-rank the caller's matches, as a k-NN side restricted to them would, and never add one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from kgqr_core import packed_vectors
from kgqr_core.field_evidence import digest, joined_text, source_paths
from kgqr_core.result_window import window_in
from plugin import schema
from plugin.field_map import FieldMap
from query_rewriter.engine.gateway import EngineSession
from query_rewriter.engine.hybrid_query import SearchFields, bm25_clause
from query_rewriter.engine.query_text import ParsedQuery
from query_rewriter.strategies.services import Search

log = logging.getLogger("kgqr.search")
# The deepest page side vectors rank: each candidate is one clause of the vector side (the
# engine's max_clause_count is 1,024), and its text and vector are read per search.
MOST_CANDIDATES = 500


@dataclass(frozen=True)
class VisibleVectors:
    """kgqr's vectors of the caller's candidates that the caller's own fetch vouches for."""

    index: str
    candidates: int
    ids: list[str]
    vectors: np.ndarray  # one row per id, unit length

    def scores(self, query: np.ndarray) -> dict[str, float]:
        """Each document's cosine similarity to `query`, as the engine's cosinesimil
        scores it ((1 + cos) / 2): the k-NN side's scores, normalised like it."""
        if not self.ids:
            return {}
        unit = query / (np.linalg.norm(query) or 1.0)
        similarity = (1.0 + self.vectors @ unit) / 2.0
        return {doc_id: float(score) for doc_id, score in zip(self.ids, similarity, strict=True)}

    def explained(self) -> dict[str, Any]:
        return {"index": self.index, "candidates": self.candidates, "scored": len(self.ids)}


@dataclass(frozen=True)
class _Stored:
    """One of kgqr's side vectors as stored: the digest of the text it was made from."""

    digest: str
    vector: np.ndarray


async def _candidates(
    caller: Search, index: str, body: dict[str, Any], end: int
) -> list[dict[str, Any]] | None:
    """The candidate search's hits; asked again as deep as the index's result window where
    the engine refuses the depth (a team's window below it lost the vector side), if the
    caller's page still fits. None: refused."""
    try:
        return list((await caller.search(index, body))["hits"]["hits"])
    except httpx.HTTPStatusError as exc:
        window = window_in(exc.response.text)
        if window is None or window < end or window >= body["size"]:
            # A 4xx is the caller's query (fuzzy options the engine refuses): not a warning.
            level = logging.WARNING if exc.response.status_code >= 500 else logging.INFO
            log.log(level, "no side vectors for a search of %s: %s", index, exc)
            return None
    return await _candidates(caller, index, {**body, "size": window}, end)


class SideVectorReads:
    """kgqr's side vectors as one search reads them. A graph strategy's seed step and the
    search's own ranking each search the caller's candidates (their filters differ), and
    the two lists mostly overlap: each stored vector is read once per search."""

    def __init__(self, kgqr: EngineSession, target: tuple[str, str, FieldMap], depth: int):
        self._kgqr = kgqr
        self._target = target  # index, KB, field map
        self._depth = depth  # KGQR_REWRITE_SIDE_VECTOR_DEPTH
        self._stored: dict[str, _Stored | None] = {}  # by id; None: no usable vector

    @classmethod
    def of(
        cls, kgqr: EngineSession, index: str, kb: str, fields: FieldMap | None, depth: int
    ) -> SideVectorReads | None:
        """None where the searched index has no side vectors (`kgqr kb embed`)."""
        if fields is None or not fields.side_vector_fields:
            return None
        return cls(kgqr, (index, kb, fields), depth)

    async def read(
        self, caller: Search, parsed: ParsedQuery, searched: SearchFields, end: int
    ) -> VisibleVectors | None:
        """The caller's top BM25 matches of `parsed`, down to the configured depth or
        `end` if deeper, and the vectors of those whose embedded text the caller sees.
        None: no vector side for this search (a page deeper than MOST_CANDIDATES, or the
        caller's candidate search refused), which BM25 and the graph rank alone.
        `caller` is the caller's own session: one search has one caller."""
        index, kb, fields = self._target
        side_index = schema.vectors_index(kb)
        embedded = fields.side_vector_fields
        depth = max(self._depth, end)
        if depth > MOST_CANDIDATES:
            return None
        body = {"size": depth, "_source": source_paths(embedded),
                "query": bm25_clause(parsed.text, parsed, searched)}  # fmt: skip
        hits = await _candidates(caller, index, body, end)
        if hits is None:
            return None
        shown = {hit["_id"]: digest(joined_text(hit.get("_source") or {}, embedded))
                 for hit in hits}  # fmt: skip
        try:
            await self._fetch([doc_id for doc_id in shown if doc_id not in self._stored])
        except httpx.HTTPError as exc:  # no vectors: BM25 and the graph still rank
            log.warning("kgqr's vectors of %s unreadable: %s", index, exc)
            return VisibleVectors(side_index, len(shown), [], np.zeros((0, 0), np.float32))
        ids, rows = [], []
        for doc_id, made_from in shown.items():
            stored = self._stored.get(doc_id)
            # A vector counts only if made from the very text the caller sees now.
            if stored is not None and stored.digest == made_from:
                ids.append(doc_id)
                rows.append(stored.vector)
        if not rows:
            return VisibleVectors(side_index, len(shown), [], np.zeros((0, 0), np.float32))
        return VisibleVectors(side_index, len(shown), ids, np.stack(rows))

    async def _fetch(self, ids: list[str]) -> None:
        """kgqr's vectors of `ids`, with its own account, unit length; those of another
        model or size (an earlier `kgqr kb embed --model`) are none."""
        if not ids:
            return
        _, kb, fields = self._target
        answer = await self._kgqr.send("POST", f"/{schema.vectors_index(kb)}/_mget",
                                       json={"ids": ids})  # fmt: skip
        answer.raise_for_status()
        for document in answer.json()["docs"]:
            source = document.get("_source") if document.get("found") else None
            stored = None
            if source is not None and source.get("model") == fields.vector_model:
                vector = packed_vectors.unpack(source["vector"])
                if len(vector) == fields.dimension:
                    unit = vector / max(float(np.linalg.norm(vector)), 1e-12)
                    stored = _Stored(str(source.get("digest")), unit)
            self._stored[document["_id"]] = stored
