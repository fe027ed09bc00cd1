"""KG-CQR (Bui et al. 2025): contextual query retrieval over a corpus knowledge graph.

1. subgraph extraction: top-k triples by query-TTR similarity (k-NN on the triples
   index), then an LLM filter drops irrelevant ones;
2. subgraph completion: beam-search BFS (beam width 3, max path length L) from the kept
   triples' entities over RELATION edges; a path's score is the mean query-TTR similarity
   of its triples; paths reaching another kept entity win; the top K = 20 new triples join;
3. contextual generation: the LLM summarises the subgraph into a context paragraph;
4. fusion: v = alpha * v_query + (1 - alpha) * v_context (the proxy applies Eq. 9), and the
   context is appended to the query for the BM25 side.

`kgcqr_no_ttr` ranks triples by their bare "head relation tail" text instead of the TTR;
`kgcqr_no_completion` skips step 2.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import numpy as np

from kgqr_core.ids import entity_id
from plugin.schema import triples_index
from query_rewriter.strategies.base import Kind, Strategy
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.params import KGCQR_K, KGCQR_PATH_LENGTH
from query_rewriter.strategies.rewrite import Rewrite
from query_rewriter.strategies.text_facts import TEXT_NOT_SHOWN
from query_rewriter.strategies.vector_lookups import (
    TRIPLE_EVIDENCE_FIELDS,
    nearest_readable_triples,
    readable_triple_hits,
    triple_cosine,
    with_readable_passage,
)

TRIPLE_FIELDS = ["id", "head", "relation", "tail", "ttr", *TRIPLE_EVIDENCE_FIELDS]


@dataclass
class Path:
    start: str
    at: str
    triples: tuple[str, ...]
    similarities: tuple[float, ...]

    @property
    def score(self) -> float:
        return float(np.mean(self.similarities)) if self.similarities else 0.0


class ContextualQueryRetrieval(Strategy):
    """`use_ttr=False` ranks bare triples (`kgcqr_no_ttr`); `complete=False` skips the
    subgraph completion (`kgcqr_no_completion`)."""

    params = (KGCQR_K, KGCQR_PATH_LENGTH)
    settings = ("kar_hub_cap", "kgcqr_beam_width", "kgcqr_completion_k")
    reads_graph = True

    def __init__(
        self,
        name: str = "kgcqr",
        use_ttr: bool = True,
        complete: bool = True,
        kind: Kind = "strategy",
    ) -> None:
        self.name = name
        self.use_ttr = use_ttr
        self.complete = complete
        self.kind = kind
        self.llm_calls = 2  # the subgraph's filter, then the context

    async def rewrite(self, query: str, ctx: StrategyContext) -> Rewrite:
        rewrite = Rewrite(strategy=self.name, query=query)
        index = triples_index(ctx.kb)
        with ctx.timer.stage("triple_retrieval"):
            query_vector = await ctx.query_vector(query)
            top = await self.top_triples(ctx, query, query_vector)
        if not top:
            missing = f"no triples in {index}: ingest a corpus graph first"
            raise ValueError(missing if ctx.text_facts else TEXT_NOT_SHOWN)
        kept = await self.llm_filter(ctx, query, top)
        rewrite.details["retrieved_triples"] = [self.fact(t) for t in top]
        rewrite.details["kept_triples"] = [self.fact(t) for t in kept]
        added: list[dict[str, Any]] = []
        if self.complete:
            with ctx.timer.stage("completion"):
                added = await self.completion(ctx, index, query_vector, kept)
            rewrite.details["completion_triples"] = [self.fact(t) for t in added]
        rewrite.sources = sorted({str(t["passage_id"]) for t in [*top, *added]})
        facts = "\n".join(f"- {self.fact(t)}" for t in [*kept, *added])
        answer = await ctx.llm_json(
            "context", "kgcqr_context", query=query, facts=facts, max_tokens=400
        )
        context = str((answer or {}).get("context") or "").strip()
        if not context:
            raise ValueError("the LLM wrote no context")
        rewrite.context = context
        rewrite.expansions = [context]
        return rewrite

    def fact(self, triple: dict[str, Any]) -> str:
        if self.use_ttr and triple.get("ttr"):
            return str(triple["ttr"])
        return f"{triple['head']} {triple['relation']} {triple['tail']}"

    async def top_triples(
        self, ctx: StrategyContext, query: str, query_vector: np.ndarray
    ) -> list[dict[str, Any]]:
        """The k triples nearest the query among those the caller may read (cut among the
        readable, as vector_lookups.nearest_readable_triples says)."""
        k = int(ctx.param(KGCQR_K))
        if self.use_ttr:
            hits = await nearest_readable_triples(ctx, query_vector, k, TRIPLE_FIELDS)
            return [{**h["_source"], "similarity": 2 * h["_score"] - 1} for h in hits]
        # No TTR: the index holds vectors of TTRs only, so embed the bare triples of a BM25
        # candidate pool and rank by cosine. The pool reads the analysed head/relation/tail
        # sub-fields, never the TTR text, or the ablation would still select through TTRs.
        fields = ["head.text", "relation.text", "tail.text"]
        words = {"multi_match": {"query": query, "fields": fields}}
        hits = await readable_triple_hits(
            ctx, k * 5, lambda depth: {"size": depth, "_source": TRIPLE_FIELDS, "query": words}
        )
        pool = [hit["_source"] for hit in hits]
        if not pool:
            return []
        vectors = await ctx.embed([self.fact(t) for t in pool])
        scored = [
            {**t, "similarity": float(v @ query_vector)} for t, v in zip(pool, vectors, strict=True)
        ]
        return sorted(scored, key=lambda t: -t["similarity"])[:k]

    async def llm_filter(
        self, ctx: StrategyContext, query: str, top: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        facts = "\n".join(f"{i}. {self.fact(t)}" for i, t in enumerate(top, start=1))
        answer = await ctx.llm_json(
            "filter", "kgcqr_filter", query=query, facts=facts, max_tokens=200
        )
        numbers = (answer or {}).get("keep")
        if not isinstance(numbers, list):
            return top[:5]  # an unusable answer keeps the most similar few
        chosen = [top[int(n) - 1] for n in numbers if str(n).isdigit() and 0 < int(n) <= len(top)]
        return list({t["id"]: t for t in chosen}.values()) or top[:5]

    async def completion(
        self,
        ctx: StrategyContext,
        index: str,
        query_vector: np.ndarray,
        kept: list[dict[str, Any]],
    ) -> list[dict[str, Any]]:
        """Beam-search BFS between the kept triples' entities; the best new triples."""
        beam = int(ctx.setting("kgcqr_beam_width"))
        max_len = int(ctx.param(KGCQR_PATH_LENGTH))
        targets = {entity_id(t[end]) for t in kept for end in ("head", "tail")}
        known = {t["id"] for t in kept}
        paths = [Path(e, e, (), ()) for e in sorted(targets)]
        finished: list[Path] = []
        similarity_of: dict[str, float] = {}
        for _ in range(max_len):
            edges = await ctx.knowledge_graph().entity_edges(
                ctx.kb,
                sorted({p.at for p in paths}),
                ctx.setting("kar_hub_cap"),
            )
            # Only edges read from passages the caller may read take part in a path: a
            # hidden one ranked in the beam pushed readable paths out of it.
            readable = await with_readable_passage(ctx, edges, lambda edge: edge[3])
            open_edges = [edge[:3] for edge in readable]
            new_ids = {tid for _, tid, _ in open_edges if tid and tid not in similarity_of}
            similarity_of.update(await triple_cosine(ctx, query_vector, new_ids))
            by_source: dict[str, list[tuple[str, str]]] = {}
            for source, triple_id, target in open_edges:
                by_source.setdefault(source, []).append((triple_id, target))
            grown: list[Path] = []
            for path in paths:
                for triple_id, target in by_source.get(path.at, []):
                    if triple_id in path.triples or triple_id not in similarity_of:
                        continue
                    step = Path(
                        path.start,
                        target,
                        (*path.triples, triple_id),
                        (*path.similarities, similarity_of[triple_id]),
                    )
                    (finished if target in targets and target != path.start else grown).append(step)
            # In a fixed order: the triples of one path tie, and their order reaches the
            # prompt, so set order (per-process string hashing) would change the rewrite.
            # Grouped once: scanning every path for each start cost starts times paths.
            by_start: dict[str, list[Path]] = {}
            for grown_path in grown:
                by_start.setdefault(grown_path.start, []).append(grown_path)
            paths = [
                kept
                for start in sorted(by_start)
                for kept in heapq.nsmallest(beam, by_start[start], key=lambda p: -p.score)
            ]
            if not paths:
                break
        candidates = finished or paths
        best: dict[str, float] = {}
        for path in candidates:
            for triple_id in path.triples:
                if triple_id not in known:
                    best[triple_id] = max(best.get(triple_id, -1.0), path.score)
        top_ids = sorted(best, key=lambda tid: -best[tid])[: int(ctx.setting("kgcqr_completion_k"))]
        if not top_ids:
            return []
        body = {
            "size": len(top_ids),
            "_source": TRIPLE_FIELDS,
            "query": {"ids": {"values": top_ids}},
        }
        hits = {
            h["_id"]: h["_source"] for h in (await ctx.triples.search(index, body))["hits"]["hits"]
        }
        return [hits[tid] for tid in top_ids if tid in hits]
