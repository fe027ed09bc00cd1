"""The connections an offline plan optimisation runs on: plans executed as the proxy would
(same executor, same hybrid search), with kgqr's own account, since the KB's owner
optimises over the whole KB; the LLM that proposes revisions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from kgqr_core import connections
from kgqr_core.embedder import get_embedder
from kgqr_core.llm import AsyncLlmClient, LlmRequest, parse_json_object
from kgqr_core.prompts import render
from kgqr_core.settings import Settings
from plugin.kb_meta import KnowledgeBaseMeta
from plugin.schema import documents_index
from query_rewriter.engine.gateway import EngineSession, opensearch_http_client
from query_rewriter.graph.store import Neo4jGraph
from query_rewriter.strategies.agent.executor import execute
from query_rewriter.strategies.agent.plan import PlanError, fill, validate
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.vector_lookups import by_ids
from workbench.agent_plans.evidence import PathSignature, signatures
from workbench.agent_plans.optimizer import Outcome
from workbench.evaluation.query_sets import JudgedQuery


@dataclass
class PlanSession:
    settings: Settings
    kb: str
    meta: KnowledgeBaseMeta
    gateway: EngineSession  # kgqr's own account: an offline optimisation, not a caller's
    graph: Neo4jGraph
    llm: AsyncLlmClient | None

    @classmethod
    @asynccontextmanager
    async def open(
        cls, settings: Settings, kb: str, meta: KnowledgeBaseMeta, llm: bool = True
    ) -> AsyncIterator[PlanSession]:
        async with (
            opensearch_http_client(settings, service_account=True) as http,
            connections.async_neo4j_driver(settings) as driver,
        ):
            yield cls(
                settings, kb, meta, EngineSession(http, {}), Neo4jGraph(driver),
                AsyncLlmClient(settings) if llm else None,
            )  # fmt: skip

    async def embed(self, texts: list[str]) -> np.ndarray:
        embedder = get_embedder(self.meta.embedder)
        return await asyncio.to_thread(embedder.encode_queries, texts)

    def context(self) -> StrategyContext:
        return StrategyContext(
            self.settings, documents_index(self.kb), self.kb, self.meta.structure,
            self.llm,  # type: ignore[arg-type]  # plans never call it
            self.gateway, self.embed, graph=self.graph, meta=self.meta,
        )  # fmt: skip

    async def run(self, template: dict[str, Any], queries: Sequence[JudgedQuery]) -> list[Outcome]:
        """The template on each question, one at a time (as searches arrive)."""
        outcomes = []
        for query in queries:
            try:
                plan = validate(fill(template, query.text), self.meta.structure)
                run = await asyncio.wait_for(
                    execute(plan, query.text, self.context()),
                    self.settings.agent.time_budget_ms / 1000,
                )
                outcomes.append(Outcome(query, run.answer))
            except (PlanError, TimeoutError) as exc:
                outcomes.append(Outcome(query, [], str(exc) or "over the time budget"))
        return outcomes

    async def propose(self, values: dict[str, str]) -> dict[str, Any] | None:
        if self.llm is None:
            raise RuntimeError("this session has no LLM")
        answer = await self.llm.complete(
            LlmRequest.user(
                render("agent_plan", **values), json_mode=True, max_tokens=700, temperature=0.4
            )
        )
        return parse_json_object(answer.texts[0])

    async def evidence(self, text: str, answers: list[str]) -> list[tuple[str, PathSignature]]:
        paths = await self.graph.named_paths(self.kb, answers, text)
        return signatures(paths, self.meta.structure.relations)

    async def describe(self, ids: list[str]) -> dict[str, str]:
        found = await by_ids(self.context(), documents_index(self.kb), ids, ["title", "type"])
        return {i: f"{s.get('title', i)} ({s.get('type', '?')})" for i, s in found.items()}
