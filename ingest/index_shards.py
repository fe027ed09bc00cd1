"""Reading an attached index shard by shard, in `_seq_no` order.

A shard numbers its writes, so its documents sorted by `_seq_no` come in one order that
only writes change, read from doc values. That serves a sync (the documents written since a
checkpoint) and every full read of the index (`kb graph --from-fields`, `kb embed`,
`--extract`), whose resumed jobs must cut the same chunks. Those sorted by `_id` before,
which loads every id of the index into the engine's heap as fielddata (deprecated, and a
refusal where a cluster turned `indices.id_field_data.enabled` off).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote


class NotOneIndex(ValueError):
    """The attached alias names several indices now (it named one when attached)."""


def shards_of(client: Any, index: str) -> list[tuple[str, int]]:
    """(index, shard number) of every shard behind `index`, which must be one index: the
    graph is keyed by _id, unique only within one, and an alias's shard numbers would
    name a shard of each of its indices. Read with what the `read` a team grants allows:
    the name resolved (`_resolve/index`), the shards a search counts (`_search_shards`
    needs a right of its own, which kgqr-ingest was refused)."""
    resolved = client.transport.perform_request("GET", f"/_resolve/index/{quote(index, safe='')}")
    names = sorted({
        *(found["name"] for found in resolved.get("indices", [])),
        *(name for alias in resolved.get("aliases", []) for name in alias.get("indices", [])),
    })  # fmt: skip
    if len(names) > 1:
        raise NotOneIndex(
            f"[{index}] names several indices now ({', '.join(names)}): point it at one, "
            "or detach it"
        )
    name = names[0] if names else index
    return [(name, shard) for shard in range(_shard_count(client, index, name))]


def _shard_count(client: Any, index: str, name: str) -> int:
    """How many shards `name`, the index behind `index`, has: what a search of it counts
    (one copy a shard). Through an alias with routing a search counts only the shards it
    routes to, whose numbers need not start at 0 (shard 3 of 5 counted as one, read as
    shard 0, read nothing), so the index itself is counted where the caller may search it;
    an alias granted alone is counted as it is searched (right unless it routes)."""
    from opensearchpy.exceptions import AuthorizationException, NotFoundError

    body = {"size": 0, "track_total_hits": False}
    if name != index:
        try:
            counted = int(client.search(index=name, body=body)["_shards"]["total"])
        except (AuthorizationException, NotFoundError):
            counted = 0
        if counted:  # 0: a security plugin set not to fail on forbidden indices emptied it
            return counted
    return int(client.search(index=index, body=body)["_shards"]["total"])


def one_copy_of(shard: int) -> dict[str, str]:
    """The search parameters that read one shard from its primary while it is up. With
    `_shards:N` alone each page of a read may go to another copy, refreshed at another
    moment (or, under segment replication, behind): a document could be missed or read
    twice at a page's edge. The primary is also the copy that holds every write."""
    return {"preference": f"_shards:{shard}|_primary_first"}


def shard_search(client: Any, index: str, shard: int, body: dict[str, Any]) -> list[Any]:
    """A search of one shard of `index`, the attached name: through an alias's filter, as
    the team's searches read it (the concrete index's name read around it, copying the
    documents the filter leaves out into the graph)."""
    hits = client.search(index=index, body=body, params=one_copy_of(shard))
    return list(hits["hits"]["hits"])


def shard_documents(
    client: Any,
    index: str,
    shard: int,
    source: list[str] | bool,
    page: int,
    after: int = -1,
    until: int | None = None,
) -> Iterator[dict[str, Any]]:
    """The hits of one shard's documents with `_seq_no` above `after` (up to `until`), in
    that order, a page at a time."""
    while until is None or after < until:
        numbers: dict[str, int] = {"gt": after} | ({"lte": until} if until is not None else {})
        body = {
            "size": page,
            "_source": source,
            "sort": [{"_seq_no": "asc"}],
            "query": {"range": {"_seq_no": numbers}},
        }
        hits = shard_search(client, index, shard, body)
        yield from hits
        if len(hits) < page:
            return
        after = int(hits[-1]["sort"][0])


def counts_between(
    client: Any, index: str, after: dict[str, int], until: dict[str, int]
) -> dict[str, int]:
    """How many documents each shard of `until` ("index/shard") holds with a `_seq_no`
    above `after`'s (-1 where it has none) up to `until`'s: fewer later means documents
    left the range (updated, so numbered past it, or deleted); a new document never
    enters it."""
    counted: dict[str, int] = {}
    for key, highest in until.items():
        numbers = {"gt": after.get(key, -1), "lte": highest}
        body = {"size": 0, "track_total_hits": True, "query": {"range": {"_seq_no": numbers}}}
        shard = int(key.rpartition("/")[2])
        answer = client.search(index=index, body=body, params=one_copy_of(shard))
        counted[key] = int(answer["hits"]["total"]["value"])
    return counted


def highest_seq_nos(client: Any, index: str) -> dict[str, int]:
    """Each shard's highest `_seq_no` among its documents now (-1: an empty shard), by
    the concrete index's name and shard."""
    latest: dict[str, int] = {}
    for name, shard in shards_of(client, index):
        body = {"size": 1, "_source": False, "sort": [{"_seq_no": "desc"}],
                "query": {"match_all": {}}}  # fmt: skip
        hits = shard_search(client, index, shard, body)
        latest[f"{name}/{shard}"] = int(hits[0]["sort"][0]) if hits else -1
    return latest


def every_document(
    client: Any,
    index: str,
    source: list[str] | bool,
    page: int,
    until: dict[str, int] | None = None,
) -> Iterator[dict[str, Any]]:
    """Every document's hit, shard after shard, each in `_seq_no` order; with `until`
    (`highest_seq_nos` taken before), only those written by then, of the shards it
    counted: a read that follows new writes never ends while they go on, and reads a
    document written again twice."""
    if until is None:
        for _, shard in shards_of(client, index):
            yield from shard_documents(client, index, shard, source, page)
        return
    for key, last in until.items():
        shard = int(key.rpartition("/")[2])
        yield from shard_documents(client, index, shard, source, page, until=last)
