"""What a rewrite was built from, so that serving it again from the cache shows the caller
nothing they may no longer read.

A cached rewrite quotes documents (PRF hits, KAR's neighbours, KG-CQR's facts, the walk's
paths) as they were readable when it was made. Permissions change under it: a role's
document-level security narrows, a document's ACL field changes, a document is deleted.
What it serves is kept with it — the documents its searches fetched as the caller, its
boosts and the passages behind its facts (Rewrite.sources), not its readability probes,
which can name a whole neighbourhood — and a cached rewrite is served only if the caller
may still read them all (one count as the caller), still sees the text its searches showed
of them, and every field value the graph edges it used were read from (an attached
index's fields); otherwise it is made afresh.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from kgqr_core.field_evidence import Evidence, FieldEvidence
from query_rewriter.strategies.services import Search
from query_rewriter.strategies.vector_lookups import usable_among


class RecordingSearch:
    """The caller's search endpoint for one rewrite, keeping the ids of every document of
    `index` (the KB's documents) that its answers held."""

    def __init__(self, inner: Search, index: str) -> None:
        self._inner = inner
        self._index = index
        self.read: set[str] = set()
        self.shown: set[FieldEvidence] = set()  # field evidence its edges needed shown

    def note_shown(self, shown: Collection[FieldEvidence]) -> None:
        self.shown.update(shown)

    async def search(
        self, index: str, body: dict[str, Any], params: dict[str, str] | None = None
    ) -> dict[str, Any]:
        answer = await self._inner.search(index, body, params)
        if fetches_documents(body):
            self._keep(index, answer)  # a readability probe fetches nothing to show
        return answer

    async def msearch(self, index: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        answers = await self._inner.msearch(index, bodies)
        for answer in answers:
            self._keep(index, answer)
        return answers

    def _keep(self, index: str, answer: dict[str, Any]) -> None:
        if index != self._index:
            return
        for hit in answer.get("hits", {}).get("hits", []):
            self.read.add(hit["_id"])
            if (text := text_shown(hit)) is not None:
                self.shown.add(text)


def text_shown(hit: dict[str, Any]) -> FieldEvidence | None:
    """What a hit showed of its document's text, as field evidence: a rewrite quotes it
    (PRF's terms, HyDE's and KAR's context, titles in paths), so a cached one is served
    again only while the caller's fetch still shows the same text. Ids alone let a role
    that came to hide or mask a field keep being served what it no longer shows."""
    source = hit.get("_source")
    if not isinstance(source, dict):
        return None
    fields = sorted(set(_text_paths(source, "")))
    return FieldEvidence.of_text(hit["_id"], fields, source) if fields else None


def _text_paths(value: Any, prefix: str) -> list[str]:
    """The dotted paths of the text a rewrite may quote in a document (a string or
    strings, not a vector), objects' and lists of objects' included: an attached index's
    title may be `metadata.title`, and a role may hide or mask it alone."""
    if isinstance(value, dict):
        return [path for name, inner in value.items()
                for path in _text_paths(inner, f"{prefix}{name}.")]  # fmt: skip
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        return [path for item in value for path in _text_paths(item, prefix)]
    strings = isinstance(value, str) or (
        isinstance(value, list) and bool(value) and all(isinstance(item, str) for item in value)
    )
    return [prefix.removesuffix(".")] if strings and prefix else []


def fetches_documents(body: dict[str, Any]) -> bool:
    """Whether a search's hits show something of their documents: not a count, nor a
    lookup of ids (`_source: false`, or only their `id` doc values: search_ids)."""
    ids_only = body.get("_source") is False or body.get("stored_fields") == "_none_"
    return not ids_only and body.get("size") != 0


async def still_readable(
    search: Search, index: str, ids: Collection[str], shown: Collection[FieldEvidence] = ()
) -> bool:
    """Whether the caller may still read every one of `ids` (counted as the caller, the
    way every readability check is), and their fetch still shows every field value `shown`
    (field-level security or masking may have narrowed, or the document changed)."""
    wanted: set[Evidence] = {*ids, *shown}
    return await usable_among(search, index, wanted) == wanted
