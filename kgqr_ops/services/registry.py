"""The local services in start order (the LLM last: it is the slowest to prepare)."""

from __future__ import annotations

from kgqr_core.settings import Settings
from kgqr_ops.services.llm_server import LlmServer
from kgqr_ops.services.local_service import LocalService
from kgqr_ops.services.neo4j_server import Neo4jServer
from kgqr_ops.services.opensearch_node import OpenSearchNode
from kgqr_ops.services.redis_server import RedisServer
from kgqr_ops.services.secured_opensearch import SecuredOpenSearchNode

SERVICE_TYPES: tuple[type[LocalService], ...] = (
    RedisServer,
    OpenSearchNode,
    Neo4jServer,
    LlmServer,
    SecuredOpenSearchNode,
)
SERVICE_NAMES: tuple[str, ...] = tuple(t.name for t in SERVICE_TYPES)


def local_services(
    settings: Settings, names: tuple[str, ...] = (), include_optional: bool = False
) -> list[LocalService]:
    """The chosen services (all but the optional ones when names is empty), in start order."""
    unknown = set(names) - set(SERVICE_NAMES)
    if unknown:
        raise ValueError(f"unknown services {sorted(unknown)}; choose from {list(SERVICE_NAMES)}")
    every = not names
    chosen = [
        t
        for t in SERVICE_TYPES
        if t.name in names or (every and (include_optional or not t.optional))
    ]
    return [t(settings) for t in chosen]
