"""The local services in start order (the LLM last: it is the slowest to prepare)."""

from __future__ import annotations

from kgqr_core.layout import ServiceLayout
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
    services: list[LocalService] = []
    for t in chosen:
        if t is OpenSearchNode:  # every node of the cluster, node 1 first
            services.extend(OpenSearchNode(settings, m) for m in OpenSearchNode.cluster(settings))
        else:
            services.append(t(settings))
    return services


def remembered_nodes(settings: Settings, nodes: int | None = None) -> Settings:
    """Settings with the local cluster's node count: `nodes` (from `up --nodes`, then
    remembered), else KGQR_OPENSEARCH_NODES if set, else what the last `up --nodes` said."""
    record = ServiceLayout(settings.home).run / "opensearch.nodes"
    if nodes is not None:
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(str(nodes))
    elif "nodes" not in settings.opensearch.model_fields_set and record.is_file():
        nodes = int(record.read_text())
    if nodes is None:
        return settings
    return settings.replaced({"opensearch_nodes": nodes})
