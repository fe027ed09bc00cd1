"""The query log's hit counts, read off an answer's content or its response."""

from __future__ import annotations

import httpx
import pytest

from query_rewriter.engine import json_codec
from query_rewriter.engine.forwarding import json_answer
from query_rewriter.search.query_log import HitCount


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ({"hits": {"total": {"value": 42, "relation": "eq"}, "hits": [{}, {}, {}]}}, (3, 42)),
        ({"hits": {"total": 7, "hits": [{}]}}, (1, 7)),  # rest_total_hits_as_int
        ({"hits": {"hits": []}}, (0, 0)),  # track_total_hits: false
        ({"hits": {"total": None, "hits": [{}, {}]}}, (2, 0)),
        ({"error": {"type": "x"}, "status": 400}, (0, 0)),
        ([], (0, 0)),
    ],
)
def test_hit_count_of_content(content: object, expected: tuple[int, int]) -> None:
    counted = HitCount.of(content)
    assert (counted.returned, counted.total) == expected


def test_hit_count_of_a_written_answer_is_not_read_back(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(raw: bytes) -> object:
        raise AssertionError("read back from its bytes")

    written = json_answer({"hits": {"total": {"value": 9}, "hits": [{}]}}, httpx.Response(200))
    monkeypatch.setattr(json_codec, "loads", refused)
    assert HitCount.of_response(written) == HitCount(1, 9)


def test_hit_count_of_a_response_that_is_not_json() -> None:
    assert HitCount.of_response(httpx.Response(502, text="<html>bad gateway</html>")) == HitCount()
    answer = httpx.Response(200, json={"hits": {"total": {"value": 5}, "hits": [{}, {}]}})
    assert HitCount.of_response(answer) == HitCount(2, 5)
