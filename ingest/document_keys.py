"""Graph edges for an index whose team names documents by a field of their own (`sku`, a
slug, a catalogue number) rather than by `_id`, as their relations file or reference
fields do.

The graph stays keyed by `_id`, which every search hit carries, so the read path needs no
lookup: keys are translated once, here, as the graph is built. A key that names no
document, or several, cannot be one end of an edge: its record is set aside with the
reason, like any broken record, and the rest of the batch lands.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Iterator
from decimal import Decimal, InvalidOperation
from itertools import islice
from typing import Any

from ingest.records import Link, Record, Refresh, Rejected
from ingest.result_window import page_size
from kgqr_core.field_evidence import field_items, source_paths
from plugin.field_map import NUMERIC_TYPES, mapped_fields

BATCH = 1_000
# A batch's documents are read in one search; more than this for BATCH keys means the
# field is no key (most values name many documents).
MOST_DOCUMENTS = 10_000


class DocumentKeys:
    """The `_id`s of an index's documents by the value of its id field, read with the
    account that builds the graph."""

    def __init__(self, client: Any, index: str, field: str) -> None:
        self.client, self.index, self.field = client, index, field
        self._numeric: bool | None = None
        self._most: int | None = None

    def numeric(self) -> bool:
        """Whether the index maps the field as a number, so that the engine finds a stored
        12.0 for the key "12" (a keyword field holding 12 matches "12" alone)."""
        if self._numeric is None:
            answer = self.client.indices.get_mapping(index=self.index)
            types = {
                found.type
                for body in answer.values()
                if (found := mapped_fields(body.get("mappings") or {}).get(self.field))
            }
            self._numeric = bool(types) and types <= set(NUMERIC_TYPES)
        return self._numeric

    def ids_of(self, keys: Collection[str]) -> dict[str, list[str]]:
        """Each key's documents (none, one, or several: the caller tells them apart)."""
        found: dict[str, list[str]] = {key: [] for key in keys}
        ordered = sorted(found)
        if self._most is None:
            self._most = page_size(self.client, self.index, MOST_DOCUMENTS)
        keys_a_search = max(1, min(BATCH, self._most * BATCH // MOST_DOCUMENTS))
        for start in range(0, len(ordered), keys_a_search):
            batch = ordered[start : start + keys_a_search]
            body = {"size": self._most, "_source": source_paths([self.field]),
                    "track_total_hits": True, "query": {"terms": {self.field: batch}}}  # fmt: skip
            answer = self.client.search(index=self.index, body=body)["hits"]
            if answer["total"]["value"] > len(answer["hits"]):
                raise ValueError(
                    f"{answer['total']['value']} documents of {self.index} hold {len(batch)} "
                    f"values of {self.field}: it is not a field that names one document each"
                )
            numeric = _by_number(batch) if self.numeric() else None
            for hit in answer["hits"]:
                for value in field_items(hit.get("_source") or {}, self.field):
                    for key in _keys_matching(value, found, numeric):
                        if hit["_id"] not in found[key]:
                            found[key].append(hit["_id"])
        return found


def _number(text: str) -> Decimal | None:
    try:
        number = Decimal(text)
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def _by_number(keys: Collection[str]) -> dict[Decimal, list[str]]:
    """The keys that spell a number, by that number."""
    numbers: dict[Decimal, list[str]] = {}
    for key in keys:
        if (number := _number(key)) is not None:
            numbers.setdefault(number, []).append(key)
    return numbers


def _keys_matching(
    value: Any, keys: Collection[str], numeric: dict[Decimal, list[str]] | None
) -> list[str]:
    """The keys a document's value answers. A numeric field (`numeric`: its batch's keys
    by number) matches the key "12" to a stored 12.0 (a table whose ids had a gap exports
    them as floats): there numbers compare as numbers, exactly (Decimal: no two long ids
    are one float); anywhere else values compare as text, as a keyword field's do."""
    if numeric is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        number = _number(str(value))
        return numeric.get(number, []) if number is not None else []
    return [str(value)] if str(value) in keys else []


def keyed(records: Iterable[Record], keys: DocumentKeys, sources: bool) -> Iterator[Record]:
    """`records` with their links' targets (and, with `sources`, their sources: a
    relations file's; a field's edge starts at the `_id` it was read from) turned from
    keys into `_id`s, a batch at a time."""
    stream = iter(records)
    while batch := list(islice(stream, BATCH)):
        links = [link for record in batch for link in _links_in(record)]
        wanted = {link.target for link in links if link.target is not None}
        wanted |= {link.source for link in links} if sources else set()
        ids = keys.ids_of(wanted)
        for record in batch:
            if isinstance(record, Link):
                yield _translated(record, ids, keys, sources)
            elif isinstance(record, Refresh):  # its links that translate; the rest set aside
                done = [_translated(link, ids, keys, sources) for link in record.links]
                yield from (link for link in done if isinstance(link, Rejected))
                kept = [link for link in done if isinstance(link, Link)]
                yield record.model_copy(update={"links": kept})
            else:
                yield record


def _links_in(record: Record) -> list[Link]:
    if isinstance(record, Link):
        return [record]
    return record.links if isinstance(record, Refresh) else []


def _translated(link: Link, ids: dict[str, list[str]], keys: DocumentKeys,
                sources: bool) -> Record:  # fmt: skip
    ends = {"target": link.target} if link.target is not None else {}
    if sources:
        ends["source"] = link.source
    update = {}
    for end, key in ends.items():
        named = ids.get(key, [])
        if len(named) != 1:
            what = "no document" if not named else f"{len(named)} documents"
            reason = f"{end} {keys.field} {key!r} names {what} of {keys.index}"
            return Rejected(reason=reason, raw=json.dumps(link.model_dump())[:4000], stage="ids")
        update[end] = named[0]
    return link.model_copy(update=update)
