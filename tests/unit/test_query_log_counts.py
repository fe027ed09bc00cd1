"""The query log's hit counts, read off an answer's content or its response."""

from __future__ import annotations

import httpx
import pytest

from query_rewriter.search.query_log import HitCount


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ({"hits": {"total": {"value": 42, "relation": "eq"}, "hits": [{}, {}, {}]}}, (3, 42)),
        ({"hits": {"total": 7, "hits": [{}]}}, (1, 7)),  # rest_total_hits_as_int
        ({"hits": {"hits": []}}, (0, 0)),  # track_total_hits: false
        ({"error": {"type": "x"}, "status": 400}, (0, 0)),
        ([], (0, 0)),
    ],
)
def test_hit_count_of_content(content: object, expected: tuple[int, int]) -> None:
    counted = HitCount.of(content)
    assert (counted.returned, counted.total) == expected


def test_hit_count_of_a_response_that_is_not_json() -> None:
    assert HitCount.of_response(httpx.Response(502, text="<html>bad gateway</html>")) == HitCount()
    answer = httpx.Response(200, json={"hits": {"total": {"value": 5}, "hits": [{}, {}]}})
    assert HitCount.of_response(answer) == HitCount(2, 5)
