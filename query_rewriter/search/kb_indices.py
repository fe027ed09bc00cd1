"""Which knowledge base a searched index belongs to: kgqr's own by their names
(`kgqr-KB-documents`), attached ones by the index or alias they were attached as.

The attached ones are read from kgqr-meta with kgqr's account (bookkeeping: which names
kgqr rewrites, never any document) and kept for a minute, so a `kgqr kb detach` reaches
every proxy within that; a name not among them is looked up again every few seconds, so
a new attach is rewritten within those.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kgqr_core.single_flight import SingleFlight
from plugin.field_map import OWN_VECTOR_FIELD, FieldMap
from plugin.schema import META_INDEX, META_READ_SIZE, kb_of_documents_index
from query_rewriter.engine.gateway import EngineSession

log = logging.getLogger("kgqr.proxy")
ATTACHED_TTL_S = 60.0
MISS_TTL_S = 5.0  # an unknown name reads kgqr-meta again at most this often


@dataclass(frozen=True)
class SearchTarget:
    """The knowledge base a search reads, and its field map (None: kgqr's own index)."""

    kb: str
    fields: FieldMap | None = None

    @property
    def word_fields(self) -> tuple[str, ...] | None:
        """The fields that hold the KB's words, for query_text; None: kgqr's own."""
        if self.fields is None:
            return None
        return (*self.fields.text_fields, "*")

    @property
    def vector_field(self) -> str | None:
        """The field a vector query must name to be rewritten; None: the KB has none."""
        return self.fields.vector_field if self.fields is not None else OWN_VECTOR_FIELD


Attached = dict[str, SearchTarget]


async def attached_in_meta(session: EngineSession) -> Attached:
    """Index or alias name -> its attached knowledge base, from kgqr-meta."""
    answer = await session.search(
        META_INDEX,
        {"size": META_READ_SIZE, "_source": ["kb", "attached"], "query": {"match_all": {}}},
    )
    found: Attached = {}
    for hit in answer["hits"]["hits"]:
        source = hit["_source"]
        if source.get("attached"):
            fields = FieldMap.model_validate(source["attached"])
            found[fields.index] = SearchTarget(source["kb"], fields)
    return found


class KnowledgeBaseIndices:
    def __init__(self, read: Callable[[], Awaitable[Attached]], ttl_s: float = ATTACHED_TTL_S):
        self._read = read
        self._ttl_s = ttl_s
        self._attached: Attached = {}
        self._read_at = -ttl_s
        self._reading: SingleFlight[Attached] = SingleFlight()

    async def target(self, index: str) -> SearchTarget | None:
        """The knowledge base `index` searches, or None for any other index."""
        own = kb_of_documents_index(index)
        if own is not None:
            return SearchTarget(own)
        age = time.monotonic() - self._read_at
        if age > self._ttl_s or (index not in self._attached and age > MISS_TTL_S):
            await self._refresh()
        return self._attached.get(index)

    async def _refresh(self) -> None:
        try:
            self._attached, _ = await self._reading.run("attached", self._read)
        except Exception as exc:  # no kgqr-meta yet, or the engine briefly away
            log.info("attached indices not read: %s", exc)
        self._read_at = time.monotonic()
