"""What the proxy holds while it runs: clients, caches, the rewriter, and per-KB structure."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from kgqr_core.settings import Settings
from plugin import kb_meta
from plugin.schema import META_INDEX
from query_rewriter.engine.caller import IdentityResolver
from query_rewriter.engine.forwarding import Upstream
from query_rewriter.search.query_log import QueryLog
from query_rewriter.search.rewriter import Rewriter

STRUCTURE_TTL_S = 60.0


@dataclass
class ProxyState:
    """`http` carries no credentials (callers' requests send their own); `service_http` is
    kgqr's own account, for kgqr's bookkeeping indices and definitions only."""

    settings: Settings
    http: httpx.AsyncClient
    service_http: httpx.AsyncClient
    upstream: Upstream
    redis: Any
    rewriter: Rewriter
    identities: IdentityResolver
    query_log: QueryLog | None = None
    neural_search: bool = True
    kb_metas: dict[str, tuple[float, kb_meta.KnowledgeBaseMeta | None]] = field(
        default_factory=dict
    )


async def meta_of(state: ProxyState, kb: str) -> kb_meta.KnowledgeBaseMeta | None:
    """The knowledge base's metadata (structure, embedder) from kgqr-meta, cached for a
    minute; None for a KB ingested before kgqr kept any."""
    cached = state.kb_metas.get(kb)
    if cached and cached[0] > time.monotonic():
        return cached[1]
    response = await state.service_http.get(f"/{META_INDEX}/_doc/{kb}")
    meta = None
    if response.status_code == 200:
        meta = kb_meta.KnowledgeBaseMeta.model_validate(response.json()["_source"])
    state.kb_metas[kb] = (time.monotonic() + STRUCTURE_TTL_S, meta)
    return meta


async def knowledge_base_names(
    client: httpx.AsyncClient, headers: Mapping[str, str] | None = None
) -> list[str]:
    """The knowledge bases kgqr-meta lists, by name, as `client` and `headers`
    authenticate: the tuning page asks with the caller's headers, graph preloading with
    kgqr's own account (its bookkeeping, never shown to a caller). Raises when refused."""
    response = await client.post(
        f"/{META_INDEX}/_search",
        json={"size": 1000, "_source": ["kb"], "sort": [{"kb": "asc"}]},
        headers=headers,
    )
    response.raise_for_status()
    return [hit["_source"]["kb"] for hit in response.json()["hits"]["hits"]]
