"""The services a strategy uses, as the small protocols it needs.

A strategy sees an LLM that completes requests, a search endpoint (the caller's own
credentials, query_rewriter/engine/gateway.py), a knowledge graph that returns
neighbourhoods (query_rewriter/graph/store.py) and an embedder. Anything with these
methods will do, so a test or a bench passes its own without reaching into the proxy.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import numpy as np

from kgqr_core.field_evidence import Evidence
from kgqr_core.graph_version import Revision
from kgqr_core.llm import LlmAnswer, LlmRequest
from query_rewriter.engine.hybrid_query import SearchFields
from query_rewriter.engine.identities import OwnDocumentsAsRead
from query_rewriter.engine.query_text import ParsedQuery
from query_rewriter.graph.store import FollowedEdge, Neighbours

Embed = Callable[[list[str]], Awaitable[np.ndarray]]
# An attached index's vectors kept by kgqr (`kgqr kb embed`): the similarity to a query
# vector of the caller's top BM25 matches of a query, at least `size` deep, by document
# id (the k-NN side the index lacks); None: no vector side for this search.
SideVectorScores = Callable[
    [ParsedQuery, SearchFields, np.ndarray, int], Awaitable[dict[str, float] | None]
]
# How the caller's fetch shows kgqr's own documents (their ids, their text): a role may
# mask or hide fields, and the engine would still answer.
OwnReadsCheck = Callable[[], Awaitable[OwnDocumentsAsRead]]


class Llm(Protocol):
    async def complete(self, request: LlmRequest) -> LlmAnswer: ...


class Search(Protocol):
    async def search(
        self, index: str, body: dict[str, Any], params: dict[str, str] | None = None
    ) -> dict[str, Any]: ...

    async def msearch(self, index: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]: ...


class Graph(Protocol):
    async def revision(self, kb: str) -> Revision | None: ...

    async def neighbours(
        self,
        kb: str,
        node_ids: list[str],
        hops: int = 2,
        cap: int = 50,
        with_names: bool = False,
    ) -> Neighbours: ...

    async def entity_edges(
        self, kb: str, frontier: list[str], cap: int = 50
    ) -> list[tuple[str, str, str, Evidence | None]]: ...

    async def follow(
        self,
        kb: str,
        sources: list[str],
        relation: str,
        direction: str,
        node_type: str | None = None,
        cap: int = 500,
    ) -> list[FollowedEdge]: ...
