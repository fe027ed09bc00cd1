"""`graph_mix`: the bridge and the walk together, with no LLM at query time.

`graph` (bridge.py) follows the first hit's links and ranks what they reach by its
similarity to the query; it won on MuSiQue, where a question's second hop hangs off its
first hit. `graph_walk` (walk.py) spreads Personalized PageRank from every hit and the
query's nearest triples' entities; it won on HotpotQA, where the second passage is a title
link away from one of several hits. Each lost where the other won.

Here a candidate document is one the first graph.bridges hits bridge to (weighted by the
rank of the best hit that reaches it) or one the walk scores; its prior mixes the two
(graph.walk_share of the walk's normalised score), and its boost is that prior times its
similarity to the query (KAR's document-based relation filtering), so a link the query
does not speak to lifts nothing. The plain first hit keeps the top boost.
"""

from __future__ import annotations

from query_rewriter.graph.store import Neighbours
from query_rewriter.strategies.base import Strategy
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.graph.bridge import FLOOR
from query_rewriter.strategies.graph.walk import (
    BOOSTS,
    DAMPING,
    HIT_WEIGHT,
    SEEDS,
    TRIPLE_SEEDS,
    WEIGHT,
    Walked,
    hits_and_triple_seeds,
    seed_hits,
    strongest_paths,
    walk_from,
)
from query_rewriter.strategies.params import Param
from query_rewriter.strategies.rewrite import Rewrite
from query_rewriter.strategies.vector_lookups import IDS_PER_QUERY, query_similarity

BRIDGES = Param("graph.bridges", "graph_bridges", 1, 20, integer=True)
WALK_SHARE = Param("graph.walk_share", "graph_walk_share", 0.0, 1.0)


class GraphMix(Strategy):
    name = "graph_mix"
    llm_calls = 0
    reads_graph = True
    params = (SEEDS, BRIDGES, WALK_SHARE, TRIPLE_SEEDS, DAMPING, HIT_WEIGHT, BOOSTS, WEIGHT)
    settings = ("kar_hub_cap",)

    async def rewrite(self, query: str, ctx: StrategyContext) -> Rewrite:
        rewrite = Rewrite(strategy=self.name, query=query)
        hits, triples = await hits_and_triple_seeds(ctx, seed_hits(ctx, query), query)
        bridge_from = [hit["id"] for hit in hits[: int(ctx.param(BRIDGES))]]
        walked = await walk_from(ctx, hits, triples)
        # The walk read every hit's two-hop neighbourhood, checked as the caller.
        bridged = self._bridged(walked.hood, bridge_from)
        share = ctx.param(WALK_SHARE)
        top_walk = max(walked.ranked.values(), default=0.0) or 1.0
        prior = {
            node: (1 - share) * bridged.get(node, 0.0)
            + share * walked.ranked.get(node, 0.0) / top_walk
            for node in {*bridged, *walked.ranked} - {hit["id"] for hit in hits[:1]}
        }
        # The engine scores at most one result window of ids: those with the best priors.
        scoring = sorted((n for n, p in prior.items() if p > 0), key=lambda n: -prior[n])
        with ctx.timer.stage("drf"):
            cosines = await query_similarity(ctx, query, set(scoring[:IDS_PER_QUERY]))
        scored = {node: cosine * prior[node] for node, cosine in cosines.items()}
        boosts = int(ctx.param(BOOSTS))
        ranked = sorted((n for n, s in scored.items() if s > FLOOR), key=lambda n: -scored[n])
        kept = ranked[:boosts]
        best = scored[kept[0]] if kept else 1.0
        # As the bridge does: the plain hits at a floor weight hold the boost sub-query's
        # min-max normalisation down, and the first hit keeps the top boost.
        rewrite.boost_ids = {hit["id"]: FLOOR for hit in hits}
        rewrite.boost_ids.update({node: scored[node] / best for node in kept})
        rewrite.boost_ids[hits[0]["id"]] = 1.0
        rewrite.boost_share = ctx.param(WEIGHT)
        near = walked.hood.around(kept)
        lifted_by = await strongest_paths(ctx, near, kept, walked.seeds)
        # The seeds it names were read by id alone: its evidence, as the passages are.
        seeds = {hit["id"] for hit in hits}
        rewrite.sources = sorted(walked.passages | seeds | lifted_by.read_from)
        rewrite.details = {
            "seeds": [hit["id"] for hit in hits],
            "kept_first": hits[0]["id"],
            "bridged_from": bridge_from,
            "entity_seeds": sorted(walked.entity_seeds)[:20],
            "graph_nodes": [
                self._node(node, scored[node] / best, bridged, walked, top_walk, lifted_by.texts)
                for node in kept
            ],
            "graph_source": walked.hood.source,
        }
        return rewrite

    @staticmethod
    def _node(
        node: str, score: float, bridged: dict[str, float], walked: Walked, top_walk: float,
        lifted_by: dict[str, str],
    ) -> dict[str, object]:  # fmt: skip
        """A boosted document in the explain: its boost, and what each signal gave it."""
        return {
            "id": node,
            "score": round(score, 4),
            "bridged": round(bridged.get(node, 0.0), 4),
            "walked": round(walked.ranked.get(node, 0.0) / top_walk, 4),
            "path": lifted_by.get(node),
        }

    @staticmethod
    def _bridged(hood: Neighbours, sources: list[str]) -> dict[str, float]:
        """Each document a source bridges to (one hop, or two through an entity it
        mentions), weighted 1/(rank + 1) by the best-ranked source that reaches it."""
        weights: dict[str, float] = {}
        for rank, source in enumerate(sources):
            for node in hood.bridged_documents([source]):
                weights[node] = max(weights.get(node, 0.0), 1 / (rank + 1))
        return weights
