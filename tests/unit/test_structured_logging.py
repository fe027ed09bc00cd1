"""kgqr's log lines: one JSON object a line, whatever a caller's query holds."""

from __future__ import annotations

import json
import logging

import pytest

from query_rewriter.structured_logging import JsonFormatter

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("line_break", ["\n", "\r", "\x85", "\u2028", "\u2029", "\x0b", "\x1e"])
def test_a_query_cannot_start_a_log_line_of_its_own(line_break: str) -> None:
    """JSON leaves U+0085, U+2028 and U+2029 as they are: a reader splitting on Unicode's
    line boundaries read the rest of the query as a log entry of its writing."""
    query = f'heat{line_break}{{"level": "ERROR", "message": "forged"}}'
    record = logging.LogRecord("kgqr.rewrite", logging.INFO, __file__, 1, "rewrite", None, None)
    record.kgqr = {"query": query}
    written = JsonFormatter().format(record)
    assert len(written.splitlines()) == 1, written
    assert json.loads(written)["kgqr"]["query"] == query
