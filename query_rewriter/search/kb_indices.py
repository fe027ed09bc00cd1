"""Which knowledge base a searched index belongs to, and the default strategy it serves:
kgqr's own by their names (`kgqr-KB-documents`), attached ones by the index or alias they
were attached as.

Attached indices and defaults are read from kgqr-meta with kgqr's account (bookkeeping:
which names kgqr rewrites and how, never any document) and kept for
KGQR_REWRITE_KB_REFRESH_S, so a `kgqr kb detach` or `kgqr kb set-default` reaches every
proxy within that; a name not among the attached is looked up again every few seconds,
so a new attach is rewritten within those.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pydantic import ValidationError

from kgqr_core.single_flight import SingleFlight
from plugin.field_map import OWN_VECTOR_FIELD, FieldMap
from plugin.kb_meta import KbDefault
from plugin.schema import META_INDEX, META_READ_SIZE, kb_of_documents_index
from query_rewriter.engine.gateway import EngineSession

log = logging.getLogger("kgqr.proxy")
DEFAULT_TTL_S = 5.0
MISS_TTL_S = 5.0  # an unknown name reads kgqr-meta again at most this often


@dataclass(frozen=True)
class SearchTarget:
    """The knowledge base a search reads, its field map (None: kgqr's own index), and the
    default a search that names no strategy gets (None: the proxy's own)."""

    kb: str
    fields: FieldMap | None = None
    default: KbDefault | None = None
    embedder: str | None = None  # the model its vectors came from (None: none, or unknown)

    @property
    def word_fields(self) -> tuple[str, ...] | None:
        """The fields that hold the KB's words, for query_text; None: kgqr's own."""
        if self.fields is None:
            return None
        return (*self.fields.text_fields, *self.fields.word_fields, "*")

    @property
    def side_vectors_only(self) -> bool:
        """Its only vectors are kgqr's side index (`kgqr kb embed`): they re-rank BM25's
        top matches, with no k-NN over the whole index."""
        return (
            self.fields is not None
            and not self.fields.vector_field
            and bool(self.fields.side_vector_fields)
        )

    @property
    def vector_field(self) -> str | None:
        """The field a vector query must name to be rewritten; None: the KB has none."""
        return self.fields.vector_field if self.fields is not None else OWN_VECTOR_FIELD


@dataclass(frozen=True)
class KnownKnowledgeBases:
    """What kgqr-meta says: attached index or alias name -> its target, and KB -> its
    current default and its embedder."""

    attached: dict[str, SearchTarget]
    defaults: dict[str, KbDefault]
    embedders: dict[str, str] = field(default_factory=dict)
    listed: frozenset[str] = frozenset()  # every KB kgqr-meta records


async def knowledge_bases_in_meta(session: EngineSession) -> KnownKnowledgeBases:
    answer = await session.search(
        META_INDEX,
        {"size": META_READ_SIZE, "_source": ["kb", "attached", "defaults", "embedder"],
         "query": {"match_all": {}}},
    )  # fmt: skip
    attached, defaults, embedders, listed = {}, {}, {}, set()
    for hit in answer["hits"]["hits"]:
        source = hit["_source"]
        kb = source.get("kb")
        if not isinstance(kb, str):
            continue
        listed.add(kb)
        # Each record read on its own: one this kgqr cannot read (a newer kgqr's default,
        # a field map it wrote) failed the whole read, and every KB kept its last reading.
        try:
            current = (
                KbDefault.model_validate(source["defaults"][-1]) if source.get("defaults") else None
            )
        except ValidationError as exc:
            _unreadable(kb, "default", exc)
            current = None
        if current is not None and current.strategy is not None:  # else cleared
            defaults[kb] = current
        if isinstance(source.get("embedder"), str):
            embedders[kb] = source["embedder"]
        if source.get("attached"):
            try:
                fields = FieldMap.model_validate(source["attached"])
            except ValidationError as exc:  # its searches pass through, as not a KB's
                _unreadable(kb, "field map", exc)
                continue
            attached[fields.index] = SearchTarget(kb, fields, defaults.get(kb), embedders.get(kb))
    return KnownKnowledgeBases(attached, defaults, embedders, frozenset(listed))


_told_unreadable: set[tuple[str, str, str]] = set()


def _unreadable(kb: str, what: str, exc: ValidationError) -> None:
    """Said once a process for each such record, not at every read (every few seconds)."""
    problem = str(exc.errors()[0].get("msg", exc))
    if (kb, what, problem) in _told_unreadable:
        return
    _told_unreadable.add((kb, what, problem))
    log.warning("kgqr-meta's %s of %s is not one this kgqr reads (%s): left out", what, kb,
                problem)  # fmt: skip


class KnowledgeBaseIndices:
    """`on_gone` hears of the knowledge bases kgqr-meta stopped recording (dropped) since
    the last read, so that what the proxy holds of them goes too."""

    def __init__(
        self,
        read: Callable[[], Awaitable[KnownKnowledgeBases]],
        ttl_s: float = DEFAULT_TTL_S,
        on_gone: Callable[[set[str]], None] | None = None,
    ) -> None:
        self._read = read
        self._ttl_s = ttl_s
        self._on_gone = on_gone
        self._known = KnownKnowledgeBases({}, {})
        self._read_at = -ttl_s
        self._reading: SingleFlight[KnownKnowledgeBases] = SingleFlight()

    async def target(self, index: str) -> SearchTarget | None:
        """The knowledge base `index` searches, or None for any other index."""
        own = kb_of_documents_index(index)
        age = time.monotonic() - self._read_at
        missing = own is None and index not in self._known.attached
        if age > self._ttl_s or (missing and age > MISS_TTL_S):
            await self._refresh()
        if own is not None:
            known = self._known
            return SearchTarget(
                own, default=known.defaults.get(own), embedder=known.embedders.get(own)
            )
        return self._known.attached.get(index)

    def listed_embedder(self, kb: str) -> str | None:
        """The model kgqr-meta named for `kb` when last read: at most the refresh interval
        old for a KB being searched, since each search asks for its target first. None:
        none named, or the KB not listed."""
        return self._known.embedders.get(kb)

    async def _refresh(self) -> None:
        try:
            known, _ = await self._reading.run("known", self._read)
        except Exception as exc:  # no kgqr-meta yet, or the engine briefly away
            log.info("knowledge bases not read from kgqr-meta: %s", exc)
        else:
            gone = set(self._known.listed - known.listed)
            self._known = known
            if gone and self._on_gone is not None:
                self._on_gone(gone)
        self._read_at = time.monotonic()
