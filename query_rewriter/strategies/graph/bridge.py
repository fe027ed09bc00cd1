"""`graph`: the plain query's first hit, and what the graph links it to, at search speed.

A multi-hop question's first hit is usually its first hop ("where was the poet born?"
finds her passage); what answers it is a document that first hit leads to (the passage of
the town it names). So the bridge reads the first hit's neighbourhood from the graph — the
documents it links to, and the documents of the entities it mentions — and ranks them by
their similarity to the query (KAR's document-based relation filtering), with no LLM call.
They become a third hybrid sub-query, as `kar+boost`'s are; the first hit gets the top
boost, so it stays first.

On the shared dev sets this beat the Personalized PageRank walk over every seed
(`graph_walk`) on MuSiQue with both embedders and on HotpotQA with Gemma, on both halves,
and tied with it on HotpotQA with MiniLM (bench/results/graph-bridge/): the walk spread the
query's weight over every entity its nearest triples named, most of them beside the point,
while the first hit's neighbours are few and each one step on.
"""

from __future__ import annotations

from query_rewriter.strategies.base import Strategy
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.graph.walk import (
    BOOSTS,
    SEEDS,
    WEIGHT,
    seed_hits,
    strongest_paths,
)
from query_rewriter.strategies.rewrite import Rewrite
from query_rewriter.strategies.vector_lookups import query_similarity, without_hidden_fields

# Below any similarity worth a boost: it only marks the plain hits as seen by the boost
# sub-query (see GraphBridge.rewrite).
FLOOR = 1e-4


class GraphBridge(Strategy):
    name = "graph"
    llm_calls = 0
    reads_graph = True
    params = (SEEDS, BOOSTS, WEIGHT)
    settings = ("kar_hub_cap",)

    async def rewrite(self, query: str, ctx: StrategyContext) -> Rewrite:
        rewrite = Rewrite(strategy=self.name, query=query)
        hits = await seed_hits(ctx, query)
        first = hits[0]["id"]
        with ctx.timer.stage("propagate"):
            hood = await ctx.knowledge_graph().neighbours(
                ctx.kb, [first], hops=2, cap=ctx.setting("kar_hub_cap")
            )
        hood = await without_hidden_fields(ctx, hood)
        candidates = hood.bridged_documents()
        with ctx.timer.stage("drf"):
            # With the caller's credentials: a document they may not read scores nothing.
            # Only the best graph.boosts: a first hit that mentions hubs reaches thousands,
            # more clauses than the engine takes in one query.
            top = int(ctx.param(BOOSTS))
            cosines = await query_similarity(ctx, query, candidates, top=top)
        ranked = sorted(
            (node for node, cosine in cosines.items() if cosine > FLOOR),
            key=lambda node: -cosines[node],
        )
        # The engine min-max normalises the boost sub-query over the documents it matched,
        # which maps the least similar candidate to nothing (with one candidate, the only
        # one). The plain hits at a floor weight pull that minimum to ~0, so a candidate's
        # boost is its similarity over the first hit's.
        rewrite.boost_ids = {hit["id"]: FLOOR for hit in hits}
        rewrite.boost_ids.update({node: cosines[node] for node in ranked})
        rewrite.boost_ids[first] = 1.0
        rewrite.boost_share = ctx.param(WEIGHT)
        # A bridged document is one hop from the first hit or two through an entity it
        # mentions; a path through another document shows it only if the caller may read
        # it (it scored), as with every path an explain shows.
        near = hood.around(ranked)
        hidden = near.vias(ranked) - set(ranked)
        lifted_by = await strongest_paths(ctx, near, ranked, {first: 1.0}, hidden=hidden)
        rewrite.sources = sorted(lifted_by.read_from)
        rewrite.details = {
            "seeds": [first],
            "kept_first": first,
            # Those the caller may read (the engine scored only those), up to graph.boosts:
            # a count of every document bridged to would tell a caller of hidden ones.
            "candidates": len(cosines),
            "graph_nodes": [
                {"id": node, "score": round(cosines[node], 4), "path": lifted_by.texts.get(node)}
                for node in ranked
            ],
            "graph_source": hood.source,
        }
        return rewrite
