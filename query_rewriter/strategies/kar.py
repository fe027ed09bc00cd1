"""KAR — knowledge-aware retrieval (Xia et al. 2024) — and its ablations.

1. entity parsing: the LLM names the query's entities, each written as a small document of
   the KB's structure; the query itself is a pseudo-entity;
2. entity document retrieval: each entity text is embedded and matched to its top-1
   document (restricted to its type when the type is one the KB has);
3. relation propagation: h-hop neighbours of the matched documents, one Neo4j round trip;
4. document-based relation filtering (DRF): neighbours scored by the query embedding
   against each neighbour's *document* embedding (exact cosine in OpenSearch, one request
   restricted to the neighbour ids); top-k kept;
5. document triples (d_i, relation, d_j) with documents truncated, written into the prompt
   as `kar_knowledge.render_knowledge` says (each document once, by default);
6. expansion: one LLM call writes n documents from the triples.

`kar_no_kg` stops after step 2 (entity documents only); `kar_no_drf` ranks neighbours by
the query's similarity to the neighbour's *name*; `kar+boost` also searches the kept
neighbours as a third hybrid sub-query, each weighted by its DRF score.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from query_rewriter.graph_store import neighbours
from query_rewriter.rewrite import Rewrite
from query_rewriter.strategies.base import Strategy
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.kar_knowledge import DocumentRelation, render_knowledge
from query_rewriter.strategies.params import EXPANSIONS, KAR_HOPS, KAR_K
from query_rewriter.strategies.vector_lookups import (
    by_ids,
    most_similar_documents,
    readable_ids,
)

DOC_FIELDS = ["id", "title", "body", "type"]


class KnowledgeAwareRewrite(Strategy):
    name = "kar"
    params = (EXPANSIONS, KAR_K, KAR_HOPS)
    settings = ("kar_hub_cap", "kar_triple_chars", "kar_knowledge_format")
    use_graph = True
    filter_by = "document"  # or "name" (kar_no_drf)
    boost = False

    async def rewrite(self, query: str, ctx: StrategyContext) -> Rewrite:
        rewrite = Rewrite(strategy=self.name, query=query)
        structure = ctx.structure_text
        entities = await self.parse_entities(query, ctx, structure)
        matched = await self.entity_documents(query, entities, ctx)
        rewrite.details["entities"] = entities
        rewrite.details["entity_documents"] = [
            {"entity": m["entity"], "id": m["id"], "title": m["title"], "score": m["score"]}
            for m in matched
        ]
        documents: dict[str, dict[str, Any]] = {m["id"]: m for m in matched}
        relations: list[DocumentRelation] = []

        def as_text(doc: dict[str, Any]) -> str:
            body = ctx.truncate(doc["body"], ctx.setting("kar_triple_chars"))
            return f"{doc['title']}: {body}"

        if self.use_graph and matched:
            kept = await self.filtered_neighbours(query, matched, ctx)
            rewrite.details["neighbours"] = [
                {
                    "id": n["id"],
                    "title": n["title"],
                    "seed": n["seed"],
                    "relation": n["relation"],
                    "score": round(n["score"], 4),
                }
                for n in kept
            ]
            for n in kept:
                documents.setdefault(n["id"], n)
            relations = [DocumentRelation(n["seed"], n["relation"], n["id"]) for n in kept]
            rewrite.details["triples"] = [
                {
                    "head": as_text(documents[r.head]),
                    "relation": r.relation,
                    "tail": as_text(documents[r.tail]),
                }
                for r in relations
            ]
            if self.boost:
                rewrite.boost_ids = {n["id"]: float(n["score"]) for n in kept}
        knowledge = render_knowledge(
            documents,
            [m["id"] for m in matched],
            relations,
            as_text,
            ctx.setting("kar_knowledge_format"),
        )
        rewrite.details["knowledge_format"] = ctx.setting("kar_knowledge_format")
        answer = await ctx.llm_json(
            "generate",
            "kar_generate",
            query=query,
            n=ctx.n_expansions,
            structure=structure,
            knowledge=knowledge or "(nothing found)",
        )
        rewrite.expansions = ctx.generated_documents(answer)
        if not rewrite.expansions:
            raise ValueError("the LLM returned no usable documents")
        return rewrite

    async def parse_entities(
        self, query: str, ctx: StrategyContext, structure: str
    ) -> list[dict[str, str]]:
        """The LLM's entities plus the query itself; a malformed answer leaves the query."""
        answer = await ctx.llm_json(
            "parse", "kar_parse", query=query, structure=structure, max_tokens=500
        )
        entities = [{"type": "", "name": query, "document": query}]
        for item in (answer or {}).get("entities") or []:
            if not isinstance(item, dict):
                continue
            name = str(item.get("name") or "").strip()
            document = str(item.get("document") or name).strip()
            if name or document:
                entity_type = str(item.get("type") or "").strip()
                entities.append({"type": entity_type, "name": name, "document": document})
        return entities[:8]

    async def entity_documents(
        self, query: str, entities: list[dict[str, str]], ctx: StrategyContext
    ) -> list[dict[str, Any]]:
        """Top-1 document per entity by k-NN; distinct documents, best score kept."""
        with ctx.timer.stage("entity_retrieval"):
            vectors = await ctx.embed([e["document"] for e in entities])
            known_types = set(ctx.structure.types)
            bodies = []
            for entity, vector in zip(entities, vectors, strict=True):
                knn: dict[str, Any] = {"vector": [float(x) for x in vector], "k": 1}
                if entity["type"] in known_types:
                    knn["filter"] = {"term": {"type": entity["type"]}}
                bodies.append({"size": 1, "_source": DOC_FIELDS, "query": {"knn": {"vector": knn}}})
            answers = await ctx.opensearch.msearch(ctx.index, bodies)
        found = [
            {**hits[0]["_source"], "entity": entity["name"], "score": hits[0]["_score"]}
            for entity, answer in zip(entities, answers, strict=True)
            if (hits := answer["hits"]["hits"])
        ]
        best: dict[str, dict[str, Any]] = {}
        for doc in found:
            if doc["id"] not in best or doc["score"] > best[doc["id"]]["score"]:
                best[doc["id"]] = doc
        return list(best.values())

    async def filtered_neighbours(
        self, query: str, matched: list[dict[str, Any]], ctx: StrategyContext
    ) -> list[dict[str, Any]]:
        hops = int(ctx.param(KAR_HOPS))
        top_k = int(ctx.param(KAR_K))
        with ctx.timer.stage("propagate"):
            found = await neighbours(
                ctx.graph_driver(),
                ctx.kb,
                [m["id"] for m in matched],
                hops,
                ctx.setting("kar_hub_cap"),
                with_names=self.filter_by == "name",
            )
        ids = found.document_ids()
        if not ids:
            return []
        with ctx.timer.stage("drf"):
            query_vector = await ctx.query_vector(query)
            if self.filter_by == "document":
                ranked = await most_similar_documents(
                    ctx, ctx.index, query_vector, ids, top_k, DOC_FIELDS
                )
                scores = {node_id: score for node_id, (score, _) in ranked.items()}
                documents = {node_id: doc for node_id, (_, doc) in ranked.items()}
            else:
                scores = await name_similarity(ctx, query_vector, found.names())
                scores = dict(sorted(scores.items(), key=lambda item: -item[1])[:top_k])
                documents = await by_ids(ctx, ctx.index, list(scores), DOC_FIELDS)
            # Graph evidence obeys document permissions: the ends of a path are documents the
            # caller's own searches returned; its middle node must be readable too, or the
            # path (which names it) is not shown.
            unchecked = found.vias(documents) - set(documents)
            hidden = unchecked - await readable_ids(ctx, ctx.index, unchecked)
        best: dict[str, dict[str, Any]] = {}
        for neighbour in found.paths(documents, hidden=hidden):
            if neighbour.id not in documents:
                continue
            row = {
                **documents[neighbour.id],
                "seed": neighbour.seed,
                "relation": neighbour.relation_text(),
                "score": scores[neighbour.id],
            }
            if neighbour.id not in best or len(row["relation"]) < len(
                best[neighbour.id]["relation"]
            ):
                best[neighbour.id] = row
        return sorted(best.values(), key=lambda r: -r["score"])[:top_k]


async def name_similarity(
    ctx: StrategyContext, query_vector: np.ndarray, by_id: dict[str, str]
) -> dict[str, float]:
    vectors = await ctx.embed(list(by_id.values()))
    return {node_id: float(v @ query_vector) for node_id, v in zip(by_id, vectors, strict=True)}


class KarWithoutGraph(KnowledgeAwareRewrite):
    name = "kar_no_kg"
    use_graph = False


class KarWithoutDocumentFiltering(KnowledgeAwareRewrite):
    name = "kar_no_drf"
    filter_by = "name"


class KarWithBoost(KnowledgeAwareRewrite):
    name = "kar+boost"
    boost = True
