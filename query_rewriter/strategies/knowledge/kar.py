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

Ablations and variants are compositions of the stages in kar_stages.py: `kar_no_kg`
stops after step 2 (entity documents only); `kar_no_drf` ranks neighbours by the query's
similarity to the neighbour's *name*; `kar+boost` also searches the kept neighbours as a
third hybrid sub-query, each weighted by its DRF score; `kar_index` links entities by the
index instead of the LLM (steps 1-2 without an LLM call).
"""

from __future__ import annotations

from query_rewriter.graph.store import Neighbour, documents_between, passages_behind
from query_rewriter.strategies.base import Kind, Strategy
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.knowledge.kar_knowledge import DocumentRelation, render_knowledge
from query_rewriter.strategies.knowledge.kar_stages import (
    DRF,
    EntityLinker,
    KbDocument,
    LinkedDocument,
    LlmEntityLinker,
    NeighbourRanker,
    RankedNeighbour,
)
from query_rewriter.strategies.params import EXPANSIONS, KAR_HOPS, KAR_K
from query_rewriter.strategies.rewrite import Rewrite
from query_rewriter.strategies.vector_lookups import readable_ids, titles_as_read


class KnowledgeAwareRewrite(Strategy):
    """`ranker=None` leaves the graph out; `boost` searches the kept neighbours too."""

    settings = ("kar_hub_cap", "kar_triple_chars", "kar_knowledge_format")

    def __init__(
        self,
        name: str = "kar",
        linker: EntityLinker | None = None,
        ranker: NeighbourRanker | None = DRF,
        boost: bool = False,
        kind: Kind = "strategy",
    ) -> None:
        self.name = name
        self.linker = linker or LlmEntityLinker()
        self.ranker = ranker
        self.boost = boost
        self.kind = kind
        self.llm_calls = self.linker.llm_calls + 1  # the entities, then the expansion
        self.params = (EXPANSIONS, KAR_K, KAR_HOPS, *self.linker.params)
        self.reads_graph = ranker is not None

    async def rewrite(self, query: str, ctx: StrategyContext) -> Rewrite:
        rewrite = Rewrite(strategy=self.name, query=query)
        linked = await self.linker.link(query, ctx)
        matched = linked.documents
        rewrite.details["entities"] = [vars(e) for e in linked.entities]
        rewrite.details["entity_documents"] = [
            {"entity": m.entity, "id": m.document.id, "title": m.document.title, "score": m.score}
            for m in matched
        ]
        documents: dict[str, KbDocument] = {m.document.id: m.document for m in matched}
        relations: list[DocumentRelation] = []

        def as_text(doc: KbDocument) -> str:
            return f"{doc.title}: {ctx.truncate(doc.body, ctx.setting('kar_triple_chars'))}"

        if self.ranker is not None and matched:
            kept = await self.kept_neighbours(query, matched, self.ranker, ctx)
            rewrite.details["neighbours"] = [
                {
                    "id": n.document.id,
                    "title": n.document.title,
                    "seed": n.seed,
                    "relation": n.relation,
                    "score": round(n.score, 4),
                }
                for n in kept
            ]
            for n in kept:
                documents.setdefault(n.document.id, n.document)
            relations = [DocumentRelation(n.seed, n.relation, n.document.id) for n in kept]
            # The relations the prompt states rest on the passages they were read from.
            rewrite.sources = sorted(set().union(*(n.read_from for n in kept)))
            rewrite.details["triples"] = [
                {
                    "head": as_text(documents[r.head]),
                    "relation": r.relation,
                    "tail": as_text(documents[r.tail]),
                }
                for r in relations
            ]
            if self.boost:
                rewrite.boost_ids = {n.document.id: n.score for n in kept}
        knowledge_format = ctx.setting("kar_knowledge_format")
        knowledge = render_knowledge(
            documents, [m.document.id for m in matched], relations, as_text, knowledge_format
        )
        rewrite.details["knowledge_format"] = knowledge_format
        answer = await ctx.llm_json(
            "generate",
            "kar_generate",
            query=query,
            n=ctx.n_expansions,
            structure=ctx.structure_text,
            knowledge=knowledge or "(nothing found)",
        )
        rewrite.expansions = ctx.generated_documents(answer)
        if not rewrite.expansions:
            raise ValueError("the LLM returned no usable documents")
        return rewrite

    async def kept_neighbours(
        self,
        query: str,
        matched: list[LinkedDocument],
        ranker: NeighbourRanker,
        ctx: StrategyContext,
    ) -> list[RankedNeighbour]:
        """Steps 3-4: the h-hop neighbours of the matched documents, the top-k by `ranker`,
        each with its shortest path from a seed."""
        with ctx.timer.stage("propagate"):
            found = await ctx.knowledge_graph().neighbours(
                ctx.kb,
                [m.document.id for m in matched],
                int(ctx.param(KAR_HOPS)),
                ctx.setting("kar_hub_cap"),
                with_names=ranker.needs_names,
            )
        with ctx.timer.stage("readable"):
            # Graph evidence obeys document permissions, before anything is ranked: a step
            # into a document, or along an edge read from a passage, that the caller may
            # not read is gone. (Checked after the cut, only a path's middle was, and a
            # ranked document whose paths all ran through hidden ones left a short list.)
            evidence = found.evidence_ids()
            found = found.without(evidence - await readable_ids(ctx, ctx.index, evidence))
        if not found.document_ids():
            return []
        with ctx.timer.stage("drf"):
            ranked = await ranker.rank(
                await ctx.query_vector(query), found, int(ctx.param(KAR_K)), ctx
            )
            near = found.around(ranked)  # the paths' rows, made once
        # The prompt and the explain name a document between by its title as the caller's
        # own fetch returns it (the graph's copy of a title ignores field-level security),
        # and the shortest path is chosen by that text too, so its length tells nothing.
        paths = [path for path in near.paths(ranked) if path.id in ranked]
        titles = await titles_as_read(ctx, ctx.index, documents_between(paths))
        shortest: dict[str, tuple[Neighbour, str]] = {}  # node -> (path, its text)
        for path in paths:
            text = path.relation_text(titles)
            if path.id not in shortest or len(text) < len(shortest[path.id][1]):
                shortest[path.id] = (path, text)
        best = [
            RankedNeighbour(ranked[node][1], path.seed, text, ranked[node][0],
                            frozenset(passages_behind([path])))
            for node, (path, text) in shortest.items()
        ]  # fmt: skip
        return sorted(best, key=lambda r: -r.score)[: int(ctx.param(KAR_K))]
