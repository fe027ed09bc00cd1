"""KAR's exchangeable stages and the typed values they pass on.

KAR and its ablations are compositions (kar.py): an entity linker (the paper's LLM parse
plus top-1 k-NN per entity, or the index alone) and, unless the graph is left out, a
neighbour ranker (by the neighbour's document, DRF, or by its name). A new variant is a
new composition in the registry, not a subclass flipping flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from query_rewriter.graph.store import Neighbours
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.params import KAR_SEEDS, Param
from query_rewriter.strategies.vector_lookups import by_ids, id_chunks, most_similar_documents

DOC_FIELDS = ["id", "title", "body", "type"]


@dataclass(frozen=True)
class Entity:
    """An entity the query names, written as a small document of the KB's structure."""

    type: str
    name: str
    document: str


@dataclass(frozen=True)
class KbDocument:
    id: str
    title: str
    body: str
    type: str

    @classmethod
    def from_source(cls, source: dict[str, Any], doc_id: str) -> KbDocument:
        return cls(
            id=str(source.get("id") or doc_id),
            title=str(source.get("title") or ""),
            body=str(source.get("body") or ""),
            type=str(source.get("type") or ""),
        )


@dataclass(frozen=True)
class LinkedDocument:
    """The document an entity was linked to, with the similarity that linked it."""

    entity: str
    document: KbDocument
    score: float


@dataclass(frozen=True)
class RankedNeighbour:
    """A kept neighbour: reached from `seed` over `relation`, scored against the query."""

    document: KbDocument
    seed: str
    relation: str
    score: float


@dataclass(frozen=True)
class Linked:
    entities: list[Entity]
    documents: list[LinkedDocument]


class EntityLinker(Protocol):
    """Finds the documents of the entities a query names."""

    params: tuple[Param, ...]
    llm_calls: int

    async def link(self, query: str, ctx: StrategyContext) -> Linked: ...


class NeighbourRanker(Protocol):
    """Scores the documents a propagation reached; the top `top_k` are kept."""

    needs_names: bool  # whether the propagation must return node names

    async def rank(
        self, query_vector: np.ndarray, found: Neighbours, top_k: int, ctx: StrategyContext
    ) -> dict[str, tuple[float, KbDocument]]: ...


class LlmEntityLinker:
    """The paper's steps 1-2: the LLM names the entities (the query itself is one more);
    each entity's text is matched to its top-1 document by k-NN, within its type when the
    KB has that type."""

    params: tuple[Param, ...] = ()
    llm_calls = 1

    async def link(self, query: str, ctx: StrategyContext) -> Linked:
        entities = await self.parse(query, ctx)
        return Linked(entities, await self.documents(entities, ctx))

    async def parse(self, query: str, ctx: StrategyContext) -> list[Entity]:
        """The LLM's entities plus the query itself; a malformed answer leaves the query."""
        answer = await ctx.llm_json(
            "parse", "kar_parse", query=query, structure=ctx.structure_text, max_tokens=500
        )
        entities = [Entity("", query, query)]
        for item in (answer or {}).get("entities") or []:
            if not isinstance(item, dict):
                continue
            name = str(item.get("name") or "").strip()
            document = str(item.get("document") or name).strip()
            if name or document:
                entities.append(Entity(str(item.get("type") or "").strip(), name, document))
        return entities[:8]

    async def documents(self, entities: list[Entity], ctx: StrategyContext) -> list[LinkedDocument]:
        """Top-1 document per entity by k-NN; distinct documents, best score kept."""
        with ctx.timer.stage("entity_retrieval"):
            vectors = await ctx.embed([e.document for e in entities])
            known_types = set(ctx.structure.types)
            bodies = []
            for entity, vector in zip(entities, vectors, strict=True):
                knn: dict[str, Any] = {"vector": [float(x) for x in vector], "k": 1}
                if entity.type in known_types:
                    knn["filter"] = {"term": {"type": entity.type}}
                bodies.append({"size": 1, "_source": DOC_FIELDS, "query": {"knn": {"vector": knn}}})
            answers = await ctx.opensearch.msearch(ctx.index, bodies)
        best: dict[str, LinkedDocument] = {}
        for entity, answer in zip(entities, answers, strict=True):
            for hit in answer["hits"]["hits"][:1]:
                doc = KbDocument.from_source(hit["_source"], hit["_id"])
                linked = LinkedDocument(entity.name, doc, float(hit["_score"]))
                if doc.id not in best or linked.score > best[doc.id].score:
                    best[doc.id] = linked
        return list(best.values())


class IndexEntityLinker:
    """No LLM: the query's top documents by the plain hybrid search are its entities'
    documents (as the `graph` strategy seeds), which leaves KAR one LLM call."""

    params: tuple[Param, ...] = (KAR_SEEDS,)
    llm_calls = 0

    async def link(self, query: str, ctx: StrategyContext) -> Linked:
        size = int(ctx.param(KAR_SEEDS))
        hits = await ctx.plain_hits(query, size, DOC_FIELDS, stage="entity_retrieval")
        documents = [
            LinkedDocument(query, KbDocument.from_source(hit["_source"], hit["_id"]), hit["_score"])
            for hit in hits
        ]
        return Linked([Entity("", query, query)], documents)


class DocumentSimilarity:
    """DRF: the query against each neighbour's *document* embedding (exact cosine in
    OpenSearch, one request restricted to the neighbour ids)."""

    needs_names = False

    async def rank(
        self, query_vector: np.ndarray, found: Neighbours, top_k: int, ctx: StrategyContext
    ) -> dict[str, tuple[float, KbDocument]]:
        ranked = await most_similar_documents(
            ctx, ctx.index, query_vector, found.document_ids(), top_k, DOC_FIELDS
        )
        return {
            node_id: (score, KbDocument.from_source(source, node_id))
            for node_id, (score, source) in ranked.items()
        }


# KAR's own ranker, the default of every composition.
DRF = DocumentSimilarity()


class NameSimilarity:
    """`kar_no_drf`: the query against each neighbour's *name*, as the caller reads it.

    The graph keeps each document's title as its node's name, which field-level security
    never reaches: ranked by those, a caller whose role hides titles learnt which hidden
    title was nearest their query (each neighbour's score is in the explain). So the
    neighbours are fetched as the caller first, and named by what that fetch shows."""

    needs_names = True

    async def rank(
        self, query_vector: np.ndarray, found: Neighbours, top_k: int, ctx: StrategyContext
    ) -> dict[str, tuple[float, KbDocument]]:
        titles: dict[str, str] = {}
        for chunk in id_chunks(list(found.names())):
            read = await by_ids(ctx, ctx.index, chunk, ["title"])
            titles.update(
                {node: KbDocument.from_source(src, node).title for node, src in read.items()}
            )
        names = [title or node for node, title in titles.items()]
        vectors = await ctx.embed(names) if names else np.zeros((0, len(query_vector)))
        scores = {node: float(v @ query_vector) for node, v in zip(titles, vectors, strict=True)}
        top = sorted(scores.items(), key=lambda item: -item[1])[:top_k]
        sources = await by_ids(ctx, ctx.index, [node for node, _ in top], DOC_FIELDS)
        return {
            node: (score, KbDocument.from_source(sources[node], node))
            for node, score in top
            if node in sources
        }
