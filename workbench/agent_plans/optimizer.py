"""STaRK's supervised plan optimisation, with AvaTaR's contrastive feedback.

For each query category: start from a plan (the un-optimised one searches the question's
text), run it on a batch of training questions, and show the LLM the plan, its scores and
the questions it answered best and worst (with their true answers); it writes a revised
plan. A revision that does not parse or names what the KB lacks is reported back as the
next round's feedback. The best plan on the training batch and the starting plan then
meet on the validation split, and the better there is kept, with its history.

The loop knows plans only as JSON and scores only through `score`, so a test drives it
with a scripted LLM over a small KB, and `kgqr agent optimize` with the real ones.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from plugin.kb_meta import DocumentStructure
from query_rewriter.strategies.agent.plan import PlanError, fill, repair, validate
from query_rewriter.strategies.agent.plan_book import PlanEntry
from workbench.agent_plans.evidence import PathSignature, most_common, path_templates
from workbench.evaluation.metrics import hit_at, recall_at, reciprocal_rank, relevant_ids
from workbench.evaluation.query_sets import JudgedQuery

log = logging.getLogger(__name__)

START_PLAN: dict[str, Any] = {"steps": [{"id": "hits", "op": "search", "text": "{query}", "k": 20}]}


@dataclass(frozen=True)
class Outcome:
    """One question under one plan: the answers in order, or why the plan failed."""

    query: JudgedQuery
    answer: list[str]
    error: str | None = None

    @property
    def first_hit_rank(self) -> int | None:
        relevant = relevant_ids(self.query.judgments)
        return next((i for i, doc in enumerate(self.answer) if doc in relevant), None)


@dataclass(frozen=True)
class Score:
    hit1: float
    hit5: float
    recall20: float
    mrr: float
    failed: int
    n: int

    @classmethod
    def of(cls, outcomes: Sequence[Outcome]) -> Score:
        n = max(len(outcomes), 1)

        def mean(metric: Callable[[Outcome], float]) -> float:
            return round(100 * sum(metric(o) for o in outcomes) / n, 1)

        return cls(
            hit1=mean(lambda o: hit_at(o.answer, o.query.judgments, 1)),
            hit5=mean(lambda o: hit_at(o.answer, o.query.judgments, 5)),
            recall20=mean(lambda o: recall_at(o.answer, o.query.judgments, 20)),
            mrr=mean(lambda o: reciprocal_rank(o.answer, o.query.judgments)),
            failed=sum(o.error is not None for o in outcomes),
            n=len(outcomes),
        )

    def key(self) -> tuple[float, float, float]:
        return self.hit1, self.recall20, self.mrr

    def text(self) -> str:
        return (f"Hit@1 {self.hit1}, Hit@5 {self.hit5}, Recall@20 {self.recall20}, "
                f"MRR {self.mrr}, failed on {self.failed} of {self.n}")  # fmt: skip


# Runs a template on questions: one Outcome per question, in order.
RunPlan = Callable[[dict[str, Any], Sequence[JudgedQuery]], Awaitable[list[Outcome]]]
# Asks the LLM for a revised template; the prompt's values in, the parsed JSON (or None).
Propose = Callable[[dict[str, str]], Awaitable[dict[str, Any] | None]]
# Titles (and types) of documents, for showing answers to the LLM.
Describe = Callable[[list[str]], Awaitable[dict[str, str]]]
# How a question's words reach answers over the graph: (named node, path) pairs.
Evidence = Callable[[str, list[str]], Awaitable[list[tuple[str, PathSignature]]]]


@dataclass
class CategoryOptimizer:
    structure: DocumentStructure
    relations_text: str
    run: RunPlan
    propose: Propose
    describe: Describe
    rounds: int = 4
    batch: int = 20
    # With it, missed questions are shown with their paths to the answers, and the common
    # paths join the start as candidate plans (evidence.py).
    evidence: Evidence | None = None
    path_candidates: bool = True  # with evidence: score the common paths as plans too
    history: list[dict[str, Any]] = field(default_factory=list)
    # Each round's outcome, as it ends (the CLI prints them: rounds of 15-80 s LLM calls
    # went by for minutes with nothing shown).
    say: Callable[[str], None] = field(default=log.info)

    def check(self, template: dict[str, Any], example: JudgedQuery) -> None:
        """PlanError unless the template fills and validates for a question of its kind."""
        validate(fill(template, example.text), self.structure)

    async def optimize(
        self,
        category: str,
        train: Sequence[JudgedQuery],
        val: Sequence[JudgedQuery],
        start: dict[str, Any] | None = None,
    ) -> PlanEntry:
        start = start or START_PLAN
        batch = list(train[: self.batch])
        self.check(start, batch[0])
        outcomes = await self.run(start, batch)
        best, best_score = start, Score.of(outcomes)
        self.history = [{"round": 0, "plan": start, "train": vars(best_score)}]
        for template in await self._path_candidates(batch):
            path_outcomes = await self.run(template, batch)
            score = Score.of(path_outcomes)
            self.history.append({"round": 0, "source": "graph paths", "plan": template,
                                 "train": vars(score)})  # fmt: skip
            if score.key() > best_score.key():
                best, best_score, outcomes = template, score, path_outcomes
        current, current_score, current_outcomes = best, best_score, outcomes
        feedback = ""
        for round_ in range(1, self.rounds + 1):
            values = await self._prompt_values(current, current_score, current_outcomes, feedback)
            proposal = repair(await self.propose(values))
            record: dict[str, Any] = {"round": round_, "plan": proposal}
            try:
                if not isinstance(proposal, dict):
                    raise PlanError("the answer was not a JSON plan")
                self.check(proposal, batch[0])
            except PlanError as exc:
                feedback = f"Your last plan was rejected: {exc}. Fix that."
                self.history.append({**record, "rejected": str(exc)})
                self.say(f"  {category} round {round_}: rejected ({exc})")
                continue
            outcomes = await self.run(proposal, batch)
            score = Score.of(outcomes)
            self.history.append({**record, "train": vars(score)})
            self.say(f"  {category} round {round_}: {score.text()}")
            feedback = ""
            if score.key() > best_score.key():
                best, best_score = proposal, score
            # Revise the best so far: a worse revision is not built upon.
            current, current_score = best, best_score
            current_outcomes = outcomes if best is proposal else current_outcomes
        return await self._validated(category, start, best, best_score, train, val)

    async def _path_candidates(self, batch: Sequence[JudgedQuery]) -> list[dict[str, Any]]:
        if self.evidence is None or not self.path_candidates:
            return []
        found = []
        for query in batch:
            for _named, signature in await self.evidence(query.text, _relevant(query)[:2]):
                found.append(signature)
        candidates = []
        for template in path_templates(most_common(found), self.structure, [q.text for q in batch]):
            try:
                self.check(template, batch[0])
            except PlanError:
                continue
            candidates.append(template)
        return candidates

    async def _validated(
        self,
        category: str,
        start: dict[str, Any],
        best: dict[str, Any],
        best_train: Score,
        train: Sequence[JudgedQuery],
        val: Sequence[JudgedQuery],
    ) -> PlanEntry:
        """The starting plan and the best revision on the validation questions: a revision
        that only fits the training batch does not replace the start."""
        start_val = Score.of(await self.run(start, val))
        best_val = start_val if best is start else Score.of(await self.run(best, val))
        chosen, chosen_val = (best, best_val) if best_val.key() > start_val.key() else (
            start, start_val)  # fmt: skip
        train_score = best_train if chosen is best else Score.of(
            await self.run(start, train[: self.batch]))  # fmt: skip
        return PlanEntry(
            category=category,
            template=chosen,
            examples=[q.text for q in train[:20]],
            scores={
                "train": vars(train_score),
                "val": vars(chosen_val),
                "val_start": vars(start_val),
            },
            history=self.history,
        )

    async def _prompt_values(
        self,
        plan: dict[str, Any],
        score: Score,
        outcomes: Sequence[Outcome],
        feedback: str,
    ) -> dict[str, str]:
        """The plan, its score, and AvaTaR's contrast: questions it answered first (what
        to keep) and ones it missed (what to fix), each with its true answers."""
        ordered = sorted(outcomes, key=lambda o: (o.first_hit_rank is None, o.first_hit_rank))
        positives = [o for o in ordered if o.first_hit_rank == 0][:2]
        negatives = [o for o in reversed(ordered) if o.first_hit_rank != 0][:3]
        shown = [*positives, *negatives]
        ids = {d for o in shown for d in [*_relevant(o.query)[:2], *o.answer[:2]]}
        names = await self.describe(sorted(ids))
        lines = []
        for o in shown:
            gold = "; ".join(names.get(d, d) for d in _relevant(o.query)[:2])
            got = "; ".join(names.get(d, d) for d in o.answer[:2]) or o.error or "nothing"
            verdict = "answered first" if o in positives else "missed"
            lines.append(f'- "{o.query.text}" -> answers: {gold} | the plan {verdict}, '
                         f"its top: {got}")  # fmt: skip
            if self.evidence is not None and o not in positives:
                paths = await self.evidence(o.query.text, _relevant(o.query)[:2])
                for named, signature in paths[:2]:
                    lines.append(f"  its words reach the answers by: {signature.describe(named)}")
        return {
            "structure": self.structure.describe(),
            "relations": self.relations_text,
            "examples": "\n".join(lines),
            "plan": json.dumps(plan),
            "score": score.text(),
            "feedback": feedback,
        }


def _relevant(query: JudgedQuery) -> list[str]:
    return [doc for doc, grade in query.judgments.items() if grade > 0]
