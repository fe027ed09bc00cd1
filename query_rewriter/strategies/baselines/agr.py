"""`agr`: analyze -> generate x2 -> refine, five LLM calls.

1. analyze the query's need; 2. generate documents from the analysis; 3. generate
documents from the analysis and the top initial hits; 4. refine the drafts against the
hits (drop unsupported claims); 5. write the final expansion from the refined drafts.
"""

from __future__ import annotations

import json

from query_rewriter.strategies.base import Strategy
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.params import EXPANSIONS, PRF_DOCS
from query_rewriter.strategies.rewrite import Rewrite


class AnalyzeGenerateRefine(Strategy):
    name = "agr"
    params = (EXPANSIONS, PRF_DOCS)
    llm_calls = 5
    kind = "baseline"

    async def rewrite(self, query: str, ctx: StrategyContext) -> Rewrite:
        rewrite = Rewrite(strategy=self.name, query=query)
        structure = ctx.structure_text
        analysis = await ctx.llm_json("analyze", "agr_analyze", query=query, structure=structure)
        analysis_text = json.dumps(analysis or {}, ensure_ascii=False)[:1200]
        hits = await ctx.initial_hits(query, int(ctx.param(PRF_DOCS)))
        documents = ctx.format_documents(hits)
        drafts = []
        for stage, grounding in (("generate_1", "(none)"), ("generate_2", documents)):
            answer = await ctx.llm_json(
                stage,
                "agr_generate",
                query=query,
                structure=structure,
                analysis=analysis_text,
                documents=grounding,
                n=2,
            )
            drafts.extend(ctx.generated_documents(answer, 2))
        candidates = drafts
        for stage in ("refine_1", "refine_2"):  # each round refines the previous round's output
            answer = await ctx.llm_json(
                stage,
                "agr_refine",
                query=query,
                documents=documents,
                drafts="\n".join(f"- {d}" for d in candidates) or "(none)",
                n=ctx.n_expansions,
            )
            candidates = ctx.generated_documents(answer) or candidates
        rewrite.expansions = candidates
        rewrite.details = {
            "analysis": analysis,
            "drafts": drafts,
            "grounding_documents": [hit["id"] for hit in hits],
        }
        if not rewrite.expansions:
            raise ValueError("the LLM returned no usable documents")
        return rewrite
