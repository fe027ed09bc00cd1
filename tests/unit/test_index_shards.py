"""Which copy of a shard a read of it asks for (ingest/index_shards.py). The engine's side,
that OpenSearch takes the preference and reads the shard, is covered by every integration
test that reads an index shard by shard; one node holds no replica to tell copies apart."""

from __future__ import annotations

from typing import Any

import pytest

from ingest.index_shards import counts_between, every_document, highest_seq_nos

pytestmark = pytest.mark.unit


class ShardedIndex:
    """Two shards, three documents each, answering `_seq_no` range searches as a node
    does; records the preference of each search."""

    def __init__(self) -> None:
        self.preferences: list[str] = []
        self.transport = self

    def perform_request(self, method: str, path: str) -> dict[str, Any]:
        return {"indices": [{"name": "team"}]}

    def search(self, index: str, body: dict[str, Any], params: Any = None) -> dict[str, Any]:
        if params is None:  # counting the shards
            return {"_shards": {"total": 2}}
        self.preferences.append(params["preference"])
        numbers = body["query"].get("range", {}).get("_seq_no", {})
        low, high = numbers.get("gt", -1), numbers.get("lte", 10**9)
        seq_nos = [n for n in range(3) if low < n <= high]
        if body.get("sort") == [{"_seq_no": "desc"}]:
            seq_nos.reverse()
        hits = [{"_id": str(n), "sort": [n]} for n in seq_nos[: body["size"]]]
        return {"hits": {"hits": hits, "total": {"value": len(seq_nos)}}}


def test_every_page_of_a_shard_is_read_from_its_primary() -> None:
    """`_shards:N` alone let each page go to another copy, refreshed at another moment: a
    document at a page's edge could be missed, or read twice."""
    index = ShardedIndex()
    until = highest_seq_nos(index, "team")
    assert until == {"team/0": 2, "team/1": 2}
    assert len(list(every_document(index, "team", ["id"], page=1, until=until))) == 6
    assert counts_between(index, "team", {}, until) == {"team/0": 3, "team/1": 3}
    assert len(index.preferences) == 2 + 2 * 3 + 2
    assert set(index.preferences) == {"_shards:0|_primary_first", "_shards:1|_primary_first"}
