"""The graph as a caller who is not shown a knowledge base's text may read it.

kgqr's own knowledge bases hold facts read from their passages' text: entities an LLM or
OpenIE found there, triples between them (KG-CQR's construction). A caller whose role hides
or masks that text (field-level security, masking) may still read the documents by id, so
the passage-by-id checks every edge gets would pass, and a path, a triple or an entity's
name would state what the text they are not shown says. For them the graph keeps only its
documents' own relations (a relations file's; HotpotQA's title links are read from text,
carry their passage, and go too), and the triples are none
(vector_lookups.readable_triple_hits). An attached index's edges each carry the field
values they were read from instead, checked against the caller's own fetch.
"""

from __future__ import annotations

from kgqr_core.field_evidence import Evidence
from kgqr_core.graph_version import Revision
from query_rewriter.graph.store import FollowedEdge, Neighbours, not_read_from_text
from query_rewriter.strategies.services import Graph

TEXT_NOT_SHOWN = (
    "the caller is not shown the text this knowledge base's graph facts were read from "
    "(or kgqr could not tell): its graph without entities and triples"
)


class WithoutTextFacts:
    """A Graph less the facts read from text (entities, the edges a passage gave)."""

    def __init__(self, graph: Graph) -> None:
        self._graph = graph

    async def revision(self, kb: str) -> Revision | None:
        return await self._graph.revision(kb)

    async def neighbours(
        self, kb: str, node_ids: list[str], hops: int = 2, cap: int = 50, with_names: bool = False
    ) -> Neighbours:
        found = await self._graph.neighbours(kb, node_ids, hops, cap, with_names)
        return found.without_text_facts()

    async def entity_edges(
        self, kb: str, frontier: list[str], cap: int = 50
    ) -> list[tuple[str, str, str, Evidence | None]]:
        return []  # every edge between entities is a triple a passage gave

    async def follow(
        self,
        kb: str,
        sources: list[str],
        relation: str,
        direction: str,
        node_type: str | None = None,
        cap: int = 500,
    ) -> list[FollowedEdge]:
        edges = await self._graph.follow(kb, sources, relation, direction, node_type, cap)
        return [edge for edge in edges if not_read_from_text(edge.target_type, edge.passage)]
