"""Bulk writes against the real engine, whose `http.max_content_length` (100 MB here)
refuses a request as a whole: one record too large to send must cost only itself."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ingest.bulk_requests import bulk_results
from ingest.opensearch_writer import WriteFailure, write_dead_letters
from plugin import schema

# In the edit-test loop (scripts/test-quick.sh): it needs only the always-on services.
pytestmark = pytest.mark.quick

HUGE_TEXT = "word " * 21_000_000  # 105 MB


@pytest.fixture
def index(opensearch: Any, unique_name: str) -> Iterator[str]:
    yield unique_name
    opensearch.indices.delete(index=unique_name, ignore_unavailable=True)


def _operation(index: str, doc_id: str, text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return {"index": {"_index": index, "_id": doc_id}}, {"text": text}


def test_a_record_too_large_to_send_fails_alone(opensearch: Any, index: str) -> None:
    operations = [_operation(index, f"d{i}", f"small {i}") for i in range(4)]
    operations.insert(2, _operation(index, "huge", HUGE_TEXT))
    results = bulk_results(opensearch, operations)
    assert [r["status"] for r in results] == [201, 201, 413, 201, 201]
    assert "more than the engine accepts in one request" in results[2]["error"]["reason"]
    opensearch.indices.refresh(index=index)
    assert opensearch.count(index=index)["count"] == 4


def test_requests_are_cut_by_size_and_keep_every_result_in_order(
    opensearch: Any, index: str
) -> None:
    operations = [_operation(index, f"d{i}", "x" * 300) for i in range(10)]
    results = bulk_results(opensearch, operations, max_bytes=1000)  # about 3 per request
    assert [r["_id"] for r in results] == [f"d{i}" for i in range(10)]
    assert {r["status"] for r in results} == {201}


def test_a_dead_letter_keeps_the_start_of_a_record_too_large_to_keep(
    opensearch: Any, unique_name: str
) -> None:
    kb = unique_name.removeprefix("kgqr-")
    record = {"kind": "document", "id": "huge", "type": "note", "text": HUGE_TEXT}
    try:
        write_dead_letters(opensearch, kb, "job", 0, [WriteFailure(record, "too large", "x")])
        dead = schema.deadletter_index(kb)
        opensearch.indices.refresh(index=dead)
        kept = opensearch.search(index=dead)["hits"]["hits"][0]["_source"]["record"]
        assert kept["id"] == "huge" and kept["truncated"].startswith('{"kind": "document"')
        assert kept["truncated"].endswith("more characters]") and len(kept["truncated"]) < 70_000
    finally:
        opensearch.indices.delete(index=schema.deadletter_index(kb), ignore_unavailable=True)
