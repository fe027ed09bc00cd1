"""What the proxy holds while it runs: clients, caches, the rewriter, and per-KB structure."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from kgqr_core.embedder_models import MODELS
from kgqr_core.settings import Settings
from plugin import kb_meta
from plugin.field_map import OWN_VECTOR_FIELD, mapped_fields
from plugin.schema import META_INDEX, META_READ_SIZE, documents_index
from query_rewriter.engine.gateway import Engine, EngineSession
from query_rewriter.engine.identities import IdentityResolver
from query_rewriter.graph.copies import SnapshotGraph
from query_rewriter.search.kb_indices import KnowledgeBaseIndices, knowledge_bases_in_meta
from query_rewriter.search.query_log import QueryLog
from query_rewriter.search.rewriter import Rewriter

STRUCTURE_TTL_S = 60.0
# A failed read is answered again from memory this long: each search asks twice (its cache
# key, then its rewrite), and a kgqr-meta answering 429 needs no more requests.
UNREADABLE_TTL_S = 2.0


@dataclass
class ProxyState:
    """`engine` is every way to OpenSearch: as a caller, as kgqr, or verbatim."""

    settings: Settings
    engine: Engine
    redis: Any
    rewriter: Rewriter
    identities: IdentityResolver
    query_log: QueryLog | None = None
    neural_search: bool = True
    kb_metas: dict[str, tuple[float, kb_meta.KnowledgeBaseMeta | None]] = field(
        default_factory=dict
    )
    # ... and the KBs whose meta could not be read, until when that answer stands.
    kb_meta_failures: dict[str, tuple[float, kb_meta.MetaUnreadable]] = field(default_factory=dict)
    # Which knowledge base a searched index is (kgqr's own, or an attached index).
    kb_indices: KnowledgeBaseIndices = field(init=False)

    def __post_init__(self) -> None:
        graph = self.rewriter.graph
        self.kb_indices = KnowledgeBaseIndices(
            lambda: knowledge_bases_in_meta(self.engine.as_kgqr()),
            self.settings.rewrite.kb_refresh_s,
            on_gone=graph.snapshots.forget if isinstance(graph, SnapshotGraph) else None,
        )


async def meta_of(state: ProxyState, kb: str) -> kb_meta.KnowledgeBaseMeta | None:
    """The knowledge base's metadata (structure, embedder) from kgqr-meta, cached for a
    minute; for a KB kgqr-meta does not record, what its documents index says of it.
    Read again sooner once the list of knowledge bases (read every few seconds) names
    another model for it: after a re-embed or `kgqr kb embed` to a model of the same size,
    queries embedded with the old one met the new vectors without an error, for a minute.
    Any other answer (403, 429, 5xx) raises, and is kept only a moment: taken for "no
    record" and kept a minute, it sent searches on with a guessed model and no field map,
    saying nothing; now each search runs as the caller sent it, saying why, until
    kgqr-meta answers."""
    now = time.monotonic()
    cached = state.kb_metas.get(kb)
    if cached and cached[0] > now and not _model_moved(state, kb, cached[1]):
        return cached[1]
    failed = state.kb_meta_failures.get(kb)
    if failed and failed[0] > now:
        raise failed[1]
    kgqr = state.engine.as_kgqr()
    try:
        response = await kgqr.send("GET", f"/{META_INDEX}/_doc/{kb}")
        meta = None
        if response.status_code == 200:
            meta = kb_meta.KnowledgeBaseMeta.model_validate(response.json()["_source"])
        elif response.status_code == 404:
            meta = await unrecorded_meta(kgqr, kb)
        else:
            raise kb_meta.MetaUnreadable(f"kgqr-meta answered {response.status_code} for {kb!r}")
    except (kb_meta.MetaUnreadable, httpx.HTTPError, ValueError, KeyError) as exc:
        # No answer, or not a record, is unreadable too; kept from the moment it came (a
        # slow 429 counts).
        unreadable = (
            exc
            if isinstance(exc, kb_meta.MetaUnreadable)
            else kb_meta.MetaUnreadable(
                f"kgqr-meta could not be read for {kb!r}: {type(exc).__name__}"
            )
        )
        state.kb_meta_failures[kb] = (time.monotonic() + UNREADABLE_TTL_S, unreadable)
        raise unreadable from None
    state.kb_meta_failures.pop(kb, None)
    state.kb_metas[kb] = (now + STRUCTURE_TTL_S, meta)
    return meta


def _model_moved(state: ProxyState, kb: str, meta: kb_meta.KnowledgeBaseMeta | None) -> bool:
    listed = state.kb_indices.listed_embedder(kb)
    return meta is not None and listed is not None and listed != meta.embedder


async def unrecorded_meta(kgqr: EngineSession, kb: str) -> kb_meta.KnowledgeBaseMeta | None:
    """A knowledge base of kgqr's own that kgqr-meta does not record (ingested before kgqr
    kept meta, or written by a worker alone): its model is the registered one whose size
    its vectors have. Not whichever model the proxy happens to hold: one KB of another
    model elsewhere made searches of such a KB send vectors of the wrong size. None where
    its index has no vectors, or their size is no one model's."""
    answer = await kgqr.send("GET", f"/{documents_index(kb)}/_mapping")
    if answer.status_code in (401, 403, 404):  # (kgqr's role need not read it: secured nodes)
        return None
    if answer.status_code != 200:
        raise kb_meta.MetaUnreadable(
            f"{documents_index(kb)}'s mapping answered {answer.status_code}, which says the "
            f"model of {kb!r}'s vectors"
        )
    vectors = [mapped_fields(entry.get("mappings") or {}).get(OWN_VECTOR_FIELD)
               for entry in answer.json().values()]  # fmt: skip
    sizes = {field.dimension if field is not None else None for field in vectors}
    models = [model for model in MODELS.values() if {model.dimension} == sizes]
    if len(models) != 1:
        return None
    model = models[0]
    return kb_meta.KnowledgeBaseMeta(
        kb=kb, structure=kb_meta.DocumentStructure(), embedder=model.name,
        dimension=model.dimension, document_revision=model.document_revision,
    )  # fmt: skip


async def knowledge_base_names(session: EngineSession) -> list[str]:
    """The knowledge bases kgqr-meta lists, by name, as `session` may read them: the tuning
    page asks as the caller, graph preloading as kgqr (its bookkeeping, never shown to a
    caller). Raises when refused."""
    answer = await session.search(
        META_INDEX, {"size": META_READ_SIZE, "_source": ["kb"], "sort": [{"kb": "asc"}]}
    )
    return [hit["_source"]["kb"] for hit in answer["hits"]["hits"]]


async def recorded_embedders(session: EngineSession) -> set[str]:
    """The models the knowledge bases' vectors came from, as kgqr-meta records them (an
    attached index without vectors records none)."""
    return set((await knowledge_bases_in_meta(session)).embedders.values())
