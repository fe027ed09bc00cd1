"""What the proxy holds while it runs: clients, caches, the rewriter, and per-KB structure."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from kgqr_core.settings import Settings
from plugin import kb_meta
from plugin.kb_meta import DocumentStructure
from plugin.schema import META_INDEX
from query_rewriter.caller import IdentityResolver
from query_rewriter.forwarding import Upstream
from query_rewriter.query_log import QueryLog
from query_rewriter.rewriter import Rewriter

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
    structures: dict[str, tuple[float, DocumentStructure]] = field(default_factory=dict)


async def structure_of(state: ProxyState, kb: str) -> DocumentStructure:
    """The knowledge base's document structure from kgqr-meta, cached for a minute."""
    cached = state.structures.get(kb)
    if cached and cached[0] > time.monotonic():
        return cached[1]
    response = await state.service_http.get(f"/{META_INDEX}/_doc/{kb}")
    structure = DocumentStructure()
    if response.status_code == 200:
        structure = kb_meta.KnowledgeBaseMeta.model_validate(response.json()["_source"]).structure
    state.structures[kb] = (time.monotonic() + STRUCTURE_TTL_S, structure)
    return structure
