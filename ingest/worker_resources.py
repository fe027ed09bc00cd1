"""Connections and models a worker process opens once and reuses for every chunk."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ingest.job_store import JobStore
from ingest.write_leases import WriteLeases
from kgqr_core import connections
from kgqr_core.embedder import Embedder, get_embedder
from kgqr_core.llm import LlmClient
from kgqr_core.settings import Settings


@dataclass
class WorkerResources:
    settings: Settings

    @cached_property
    def opensearch(self) -> Any:
        return connections.opensearch_client(self.settings)

    @cached_property
    def neo4j(self) -> Any:
        return connections.neo4j_driver(self.settings)

    @cached_property
    def redis(self) -> Any:
        return connections.redis_client(self.settings)

    @cached_property
    def jobs(self) -> JobStore:
        return JobStore(self.redis)

    @cached_property
    def leases(self) -> WriteLeases:
        return WriteLeases(self.redis)

    @cached_property
    def embedder(self) -> Embedder:
        return get_embedder(self.settings.embedder.model)

    @cached_property
    def dimension(self) -> int:
        return self.embedder.dimension

    @cached_property
    def llm(self) -> LlmClient:
        return LlmClient(self.settings, self.redis)
