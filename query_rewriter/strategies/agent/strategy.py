"""`agent`: the KB's optimised retrieval plan for the query's category, run by kgqr.

STaRK's agent retriever and AvaTaR after it have an LLM write a retrieval program over a
knowledge base's operations and optimise it on training queries. Here the programs are
plan templates in a small JSON language (query_rewriter/strategies/agent/plan.py), optimised offline
by `kgqr agent optimize` and stored in the KB's meta; online a template is chosen by the
query's nearest training category, its slots are filled from the query, and kgqr runs it:
no LLM call at search time. The plan's answers become the hybrid query's boost sub-query
with their own share (`agent.weight`), so BM25 and k-NN order what the plan leaves tied.
"""

from __future__ import annotations

import asyncio
import logging

from kgqr_core.settings import Settings
from query_rewriter.strategies.agent.executor import execute
from query_rewriter.strategies.agent.plan import PlanError, fill, validate
from query_rewriter.strategies.agent.plan_book import Router, book_of
from query_rewriter.strategies.base import Strategy
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.params import Param
from query_rewriter.strategies.rewrite import Rewrite

log = logging.getLogger("kgqr.rewrite")

ANSWERS = Param("agent.answers", "agent_answers", 1, 200, integer=True)
WEIGHT = Param("agent.weight", "agent_boost_share", 0.0, 1.0)


def plan_order_boosts(ranked: list[str], n: int, spare: list[str]) -> dict[str, float]:
    """Boosts for the plan's first `n` answers: 1 for the first, then 0.55 falling evenly
    to 0.30 for the last, and a near-zero floor on one more document.

    The engine min-max normalises the boost sub-query. With the default share (0.7) the
    first answer is then 0.7 x 0.45 = 0.315 ahead of the second on the boost alone, more
    than the text sides hold together (0.3), so no text match lifts anything above the
    plan's first answer; the others keep at least 0.21, more than most text matches, and
    may trade places on their text. Equal boosts let the whole question's text re-order
    the answers (library "described as" questions: Hit@1 40.6 where the plan's own order
    gives 90); 1/(rank+1) left the seventh of seven answers a boost of 0.01, outside the
    first 20 hits. The floor goes to the answer after the n-th, else to a document the
    plan's searches found (the caller may read it), so that the last answer is not the
    minimum the normalisation maps to zero."""
    top = ranked[:n]
    boosts = {node: 1.0 if rank == 0 else 0.55 - 0.25 * (rank - 1) / max(len(top) - 2, 1)
              for rank, node in enumerate(top)}  # fmt: skip
    floor = next((node for node in [*ranked[n:], *spare] if node not in boosts), None)
    if floor is not None:
        boosts[floor] = 0.001
    return boosts


class PlanAgent(Strategy):
    name = "agent"
    llm_calls = 0
    reads_plans = True
    reads_graph = True
    params = (ANSWERS, WEIGHT)
    settings = ("agent_time_budget_ms",)

    def __init__(self) -> None:
        self.router = Router()

    def own_time_s(self, settings: Settings) -> float:
        return float(settings.value("agent_time_budget_ms")) / 1000

    async def rewrite(self, query: str, ctx: StrategyContext) -> Rewrite:
        book = book_of(ctx.meta)
        if book is None or not book.entries:
            raise ValueError(
                f"no optimised plans for knowledge base {ctx.kb!r}: run "
                f"`kgqr agent optimize --kb {ctx.kb} --queries TRAIN.jsonl`"
            )
        vector = await ctx.query_vector(query)
        model = ctx.meta.embedder if ctx.meta else ""
        entry, similarity = await self.router.choose(book, (ctx.kb, model), vector, ctx.embed)
        try:
            plan = validate(fill(entry.template, query), ctx.structure)
        except PlanError as exc:
            # Its message names the plan's steps and the KB's types and relations, which
            # are kgqr-meta's; a fallback's reason reaches every caller.
            log.warning("an optimised plan does not fit", extra={"kgqr": {"kb": ctx.kb,
                        "category": entry.category, "reason": str(exc)}})  # fmt: skip
            raise PlanError(
                "the plan chosen for this query does not fit it or the knowledge base's "
                "structure now (kgqr's log says how): run `kgqr agent optimize` again"
            ) from None
        budget_s = ctx.setting("agent_time_budget_ms") / 1000
        run = await asyncio.wait_for(execute(plan, query, ctx), timeout=budget_s)
        answers = run.answer[: int(ctx.param(ANSWERS))]
        if not answers:
            # Not named: the plan's category is kgqr-meta's, and a fallback's reason reaches
            # every caller (the X-Kgqr-Fallback header).
            raise ValueError("the plan chosen for this query found nothing")
        rewrite = Rewrite(strategy=self.name, query=query)
        rewrite.boost_ids = plan_order_boosts(run.answer, len(answers), run.searched)
        rewrite.boost_share = ctx.param(WEIGHT)
        rewrite.sources = sorted(run.read)
        rewrite.details = {
            "category": entry.category,
            "similarity": round(similarity, 4),
            "plans_version": book.version,
            "plan": plan.as_json(),
            "steps": run.explain(),
            "answers": answers[:10],
        }
        return rewrite
