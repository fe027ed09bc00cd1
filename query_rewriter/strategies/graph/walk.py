"""`graph_walk`: graph-aware retrieval with no LLM at query time, by a walk over every seed.

In the spirit of HippoRAG 2: seeds come from the index, not an LLM — the query's top
documents by the same hybrid search (entity documents, or passages), and, where the
knowledge base has a corpus graph, the entities of the triples nearest the query (query
to TTR). One bounded Neo4j round trip fetches their two-hop neighbourhood (hubs capped);
Personalized PageRank (damping 0.5 by default) spreads the seeds' weight over it; the
top-scored documents the caller may read become a third hybrid sub-query, as `kar+boost`
does, so the graph lifts documents near the query's evidence without an LLM call. The walk
carries most of the score (`graph.weight`, 0.6) below the plain query's first hit, which
stays first.

`graph` (bridge.py) follows only the first hit's links and beat this walk on the
shared dev sets; the walk stays for knowledge bases where the query's own entities, not
its first hit, lead to the answer, and for comparison.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from kgqr_core.ids import entity_id
from query_rewriter.graph.store import (
    Neighbour,
    Neighbourhood,
    Neighbours,
    Reach,
    documents_between,
    passages_behind,
)
from query_rewriter.strategies.base import Strategy
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.params import Param
from query_rewriter.strategies.rewrite import Rewrite
from query_rewriter.strategies.vector_lookups import (
    nearest_readable_triples,
    readable_ids,
    tell_once,
    titles_as_read,
)

SEEDS = Param("graph.seeds", "graph_seeds", 1, 50, integer=True)
TRIPLE_SEEDS = Param("graph.triple_seeds", "graph_triple_seeds", 0, 50, integer=True)
DAMPING = Param("graph.damping", "graph_damping", 0.05, 0.95)
BOOSTS = Param("graph.boosts", "graph_boosts", 1, 100, integer=True)
HIT_WEIGHT = Param("graph.hit_weight", "graph_hit_weight", 0.001, 10.0)
WEIGHT = Param("graph.weight", "graph_boost_share", 0.0, 1.0)
ITERATIONS = 30


def personalized_pagerank(reach: Reach, weights: Sequence[float], damping: float) -> np.ndarray:
    """Stationary scores of a walk that, at each step, follows an edge with probability
    `damping` and restarts at a seed otherwise (seed i, the reach's i-th node, in
    proportion to weights[i]). Power iteration until the change falls below 1e-9 (~25
    iterations at damping 0.5), at most ITERATIONS."""
    size = len(reach.nodes)
    restart = np.zeros(size)
    restart[: len(weights)] = weights
    if restart.sum() <= 0:
        return np.zeros(size)
    restart /= restart.sum()
    if not len(reach.sources):
        return restart
    rows = np.concatenate([reach.sources, reach.targets])
    cols = np.concatenate([reach.targets, reach.sources])
    degree = np.bincount(rows, minlength=size).astype(float)
    inverse_degree = np.divide(1.0, degree, out=np.zeros_like(degree), where=degree > 0)
    isolated = degree == 0
    score = restart.copy()
    for _ in range(ITERATIONS):
        spread = np.bincount(cols, weights=(score * inverse_degree)[rows], minlength=size)
        # Mass at a node without edges goes back to the seeds rather than vanishing.
        stuck = float(score[isolated].sum())
        settled = damping * (spread + stuck * restart) + (1 - damping) * restart
        change = float(np.abs(settled - score).sum())
        score = settled
        if change < 1e-9:
            break
    return score


def top_documents(
    nodes: Sequence[str], scores: np.ndarray, documents: np.ndarray, k: int
) -> dict[str, float]:
    """The k best-scored nodes flagged in `documents`, best first (ties in node order)."""
    chosen = np.flatnonzero(documents & (scores > 0))
    best = chosen[np.argsort(-scores[chosen], kind="stable")[:k]]
    return {nodes[number]: float(scores[number]) for number in best}


@dataclass(frozen=True)
class LiftedBy:
    """Each lifted node's path as text, and the documents the edges they state were read
    from (a rewrite's sources)."""

    texts: dict[str, str]
    read_from: set[str]


async def strongest_paths(
    ctx: StrategyContext,
    hood: Neighbourhood,
    nodes: list[str],
    seeds: dict[str, float],
    hidden: Collection[str] = (),
) -> LiftedBy:
    """For each node, the path that lifted it most: the shortest from the heaviest other
    seed, as "seed --relation--> node" (two hops name the node between, a document by
    its title as the caller's own fetch returns it)."""

    def strength(path: Neighbour) -> tuple[int, float, str]:
        return path.hops, -seeds.get(path.seed, 0.0), path.seed

    chosen: dict[str, Neighbour] = {}
    with ctx.timer.stage("paths"):  # the explain's alone: nothing ranks by them
        for path in hood.paths(nodes, hidden=hidden, between_seeds=True):
            if path.id not in chosen or strength(path) < strength(chosen[path.id]):
                chosen[path.id] = path
        titles = await titles_as_read(ctx, ctx.index, documents_between(chosen.values()))
    texts = {node: f"{p.seed} --{p.relation_text(titles)}--> {node}" for node, p in chosen.items()}
    return LiftedBy(texts, passages_behind(chosen.values()))


async def plain_seeds(ctx: StrategyContext, query: str) -> list[dict[str, Any]]:
    """The plain query's top graph.seeds hits, by id alone: no graph strategy reads more
    of them, and fetching their title and text made this search cost as much as base's
    whole search (search_ids)."""
    hits = await ctx.plain_hits(query, int(ctx.param(SEEDS)), None)
    return [{"id": hit["_id"]} for hit in hits]


async def seed_hits(ctx: StrategyContext, query: str) -> list[dict[str, Any]]:
    """plain_seeds, where the bridge starts; none leaves the graph nothing to start from,
    a failure the search falls back from."""
    hits = await plain_seeds(ctx, query)
    if not hits:
        raise ValueError("no seeds: the plain query found nothing")
    return hits


@dataclass(frozen=True)
class Walked:
    """What a walk from a query's hits (and the entities of its nearest triples) reached:
    the best-scored documents the caller may read, best first, and what explains them."""

    ranked: dict[str, float]
    hood: Neighbours  # the readable neighbourhood it walked
    seeds: dict[str, float]
    entity_seeds: dict[str, float]
    passages: set[str]  # the passages of the triples whose entities seeded it


@dataclass(frozen=True)
class TripleSeeds:
    """The entities of the triples nearest the query, by similarity, and their passages."""

    entities: dict[str, float]
    passages: set[str]


async def hits_and_triple_seeds(
    ctx: StrategyContext, plain_hits: Awaitable[list[dict[str, Any]]], query: str
) -> tuple[list[dict[str, Any]], TripleSeeds]:
    """The plain query's hits and its nearest triples' entities, fetched side by side:
    both wait only on the query's one embedding, so the triples cost no time of their own
    (8-12 ms p50 in series on the MuSiQue dev set)."""
    triples = _triple_entities(ctx, query, int(ctx.param(TRIPLE_SEEDS)))
    # Both run to their end, so neither is left behind with an error nobody reads.
    hits, seeds = await asyncio.gather(plain_hits, triples, return_exceptions=True)
    if isinstance(hits, BaseException):
        raise hits
    if isinstance(seeds, BaseException):
        raise seeds
    return hits, seeds


async def walk_from(
    ctx: StrategyContext, hits: list[dict[str, Any]], triples: TripleSeeds
) -> Walked:
    """Personalized PageRank from the hits (rank-weighted) and the query's nearest
    triples' entities over their readable two-hop neighbourhood; the top graph.boosts
    documents."""
    # Rank-based weights: the hybrid scores of two searches are not comparable. Beside
    # the triples' entities the hits weigh little (HippoRAG 2's passage weight), else
    # the walk mostly repeats the plain ranking; alone, their scale does not matter.
    hit_weight = ctx.param(HIT_WEIGHT)
    seeds = {hit["id"]: hit_weight / (rank + 1) for rank, hit in enumerate(hits)}
    seeded_by_hits = len(seeds)
    entity_seeds, passages = triples.entities, triples.passages
    for node, weight in entity_seeds.items():
        seeds[node] = seeds.get(node, 0.0) + weight
    if not seeds:
        raise ValueError("no seeds: the plain query found nothing")
    with ctx.timer.stage("propagate"):
        hood = await ctx.knowledge_graph().neighbours(
            ctx.kb, list(seeds), hops=2, cap=ctx.setting("kar_hub_cap")
        )
    with ctx.timer.stage("readable"):
        # Before the walk, not after it: an edge read from a passage the caller may not
        # read, or a step through a document hidden from them, must not carry score
        # either (checked after the walk, only the boosted documents and the middles
        # of their paths were, and a hidden passage's triple still lifted and showed).
        evidence = hood.evidence_ids()
        hood = hood.without(evidence - await readable_ids(ctx, ctx.index, evidence))
    with ctx.timer.stage("walk"):
        reach = hood.reach(list(seeds))
        scores = personalized_pagerank(reach, list(seeds.values()), ctx.param(DAMPING))
        documents = reach.documents.copy()
        documents[:seeded_by_hits] = True  # the hits seed first, and are documents
        ranked = top_documents(reach.nodes, scores, documents, int(ctx.param(BOOSTS)))
    return Walked(ranked, hood, seeds, entity_seeds, passages)


class GraphWalk(Strategy):
    name = "graph_walk"
    llm_calls = 0
    reads_graph = True
    params = (SEEDS, TRIPLE_SEEDS, DAMPING, BOOSTS, HIT_WEIGHT, WEIGHT)
    settings = ("kar_hub_cap",)

    async def rewrite(self, query: str, ctx: StrategyContext) -> Rewrite:
        rewrite = Rewrite(strategy=self.name, query=query)
        hits, triples = await hits_and_triple_seeds(ctx, plain_seeds(ctx, query), query)
        walked = await walk_from(ctx, hits, triples)
        ranked = walked.ranked
        kept = list(ranked)
        near = walked.hood.around(kept)
        top = ranked[kept[0]] if kept else 1.0
        rewrite.boost_ids = {node: ranked[node] / top for node in kept}
        # The walk adds what the query's evidence reaches but never displaces its best
        # match: the plain first hit gets the top boost (fusion's pin without a second
        # search), which lets the walk weigh more than the text (graph.weight). "First" of
        # the top graph.seeds: min-max normalisation runs over the hits each side returns,
        # so a page of another size may put another near-tied hit first.
        if hits:
            rewrite.boost_ids[hits[0]["id"]] = 1.0
        rewrite.boost_share = ctx.param(WEIGHT)
        lifted_by = await strongest_paths(ctx, near, kept, walked.seeds)
        # The seeds it names were read by id alone: its evidence, as the passages are.
        seeds = {hit["id"] for hit in hits}
        rewrite.sources = sorted(walked.passages | seeds | lifted_by.read_from)
        rewrite.details = {
            "seeds": [hit["id"] for hit in hits],
            "kept_first": hits[0]["id"] if hits else None,  # boosted as the walk's top
            "entity_seeds": sorted(walked.entity_seeds)[:20],
            "graph_nodes": [
                {
                    "id": node,
                    "score": round(ranked[node] / top, 4),
                    "path": lifted_by.texts.get(node),
                }
                for node in kept
            ],
            "graph_source": walked.hood.source,
        }
        return rewrite


async def _triple_entities(ctx: StrategyContext, query: str, k: int) -> TripleSeeds:
    """The entities of the k readable triples nearest the query (TTR vectors), weighted
    by their similarity, when the knowledge base has a corpus graph; and the passages
    those triples come from."""
    if k == 0:
        return TripleSeeds({}, set())
    with ctx.timer.stage("triple_seeds"):
        vector = await ctx.query_vector(query)
        try:
            hits = await nearest_readable_triples(ctx, vector, k, ["head", "tail", "passage_id"])
        except httpx.HTTPStatusError as exc:
            status = exc.response.status_code
            if status != 404:  # else no triples: an entity-centric KB
                # A 403 looked like no triples, and the walk went on weaker, unsaid.
                tell_once(f"{ctx.kb}: the walk's triple seeds were not read ({status}): {exc}")
            return TripleSeeds({}, set())
    weights: dict[str, float] = {}
    for hit in hits:
        similarity = max(2 * float(hit["_score"]) - 1, 0.0)
        for name in (hit["_source"].get("head"), hit["_source"].get("tail")):
            if name:
                node = entity_id(str(name))
                weights[node] = max(weights.get(node, 0.0), similarity)
    return TripleSeeds(weights, {str(hit["_source"]["passage_id"]) for hit in hits})
