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
from query_rewriter.strategies.context import StrategyContext, source_text
from query_rewriter.strategies.params import KAR_SEEDS, Param
from query_rewriter.strategies.vector_lookups import by_ids, id_chunks, most_similar_documents


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
    def from_source(cls, source: dict[str, Any], doc_id: str, ctx: StrategyContext) -> KbDocument:
        """A hit as KAR reads it: by its `_id` (what the graph knows; an attached index's
        own `id` field may name another document) and the fields its map names."""
        return cls(
            id=doc_id,
            title=source_text(source, ctx.title_field),
            body=source_text(source, ctx.body_field),
            type=str(source.get("type") or "") if ctx.fields is None else "",
        )


def vector_field(ctx: StrategyContext) -> str:
    """The field KAR's k-NN and DRF read; an index without one cannot run KAR (side vectors
    re-rank a search's own matches, they are no k-NN over the index)."""
    if not (field := ctx.search_fields.vector):
        raise ValueError(f"{ctx.index} has no vector field: KAR links entities by k-NN")
    return field


def document_fields(ctx: StrategyContext) -> list[str]:
    """What KAR reads of a document: its title and body (an attached index's map names
    them), and its type in kgqr's own documents."""
    own_type = ["type"] if ctx.fields is None else []
    return [name for name in (ctx.title_field, ctx.body_field, *own_type) if name]


@dataclass(frozen=True)
class LinkedDocument:
    """The document an entity was linked to, with the similarity that linked it."""

    entity: str
    document: KbDocument
    score: float


@dataclass(frozen=True)
class RankedNeighbour:
    """A kept neighbour: reached from `seed` over `relation`, scored against the query;
    `read_from`: the documents that relation's edges were read from."""

    document: KbDocument
    seed: str
    relation: str
    score: float
    read_from: frozenset[str] = frozenset()


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
            # Types are kgqr's own documents' field; an attached index has none of them.
            known_types = set(ctx.structure.types) if ctx.fields is None else set()
            fields, by_vector = document_fields(ctx), vector_field(ctx)
            bodies = []
            for entity, vector in zip(entities, vectors, strict=True):
                knn: dict[str, Any] = {"vector": [float(x) for x in vector], "k": 1}
                if entity.type in known_types:
                    knn["filter"] = {"term": {"type": entity.type}}
                query = {"knn": {by_vector: knn}}
                bodies.append({"size": 1, "_source": fields, "query": query})
            answers = await ctx.opensearch.msearch(ctx.index, bodies)
        best: dict[str, LinkedDocument] = {}
        for entity, answer in zip(entities, answers, strict=True):
            for hit in answer["hits"]["hits"][:1]:
                doc = KbDocument.from_source(hit["_source"], hit["_id"], ctx)
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
        hits = await ctx.plain_hits(query, size, document_fields(ctx), stage="entity_retrieval")
        documents = [
            LinkedDocument(
                query, KbDocument.from_source(hit["_source"], hit["_id"], ctx), hit["_score"]
            )
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
        vector_field(ctx)  # raises, saying why, where there is none
        ranked = await most_similar_documents(
            ctx, ctx.index, query_vector, found.document_ids(), top_k, document_fields(ctx)
        )
        return {
            node_id: (score, KbDocument.from_source(source, node_id, ctx))
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
            read = await by_ids(ctx, ctx.index, chunk, [ctx.title_field] if ctx.title_field else [])
            titles.update({node: source_text(src, ctx.title_field) for node, src in read.items()})
        names = [title or node for node, title in titles.items()]
        vectors = await ctx.embed(names) if names else np.zeros((0, len(query_vector)))
        scores = {node: float(v @ query_vector) for node, v in zip(titles, vectors, strict=True)}
        top = sorted(scores.items(), key=lambda item: -item[1])[:top_k]
        sources = await by_ids(ctx, ctx.index, [node for node, _ in top], document_fields(ctx))
        return {
            node: (score, KbDocument.from_source(sources[node], node, ctx))
            for node, score in top
            if node in sources
        }
