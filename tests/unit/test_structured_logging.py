"""kgqr's log lines: one JSON object a line, whatever a caller's query holds."""

from __future__ import annotations

import json
import logging

import pytest

from kgqr_core.outage_notice import OnceEvery
from query_rewriter.engine.query_text import parse_query
from query_rewriter.search import rewriter
from query_rewriter.structured_logging import VALUE_CHARS, JsonFormatter

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


def test_a_callers_words_reach_a_log_line_clipped() -> None:
    """A field name of a megabyte is a demand the explain shows and every rewrite logs:
    a small gzipped _msearch of such queries wrote ten megabytes of log, on the loop."""
    huge = "x" * 1_000_000
    parsed = parse_query({"match": {huge: "heat"}})
    assert parsed is not None and parsed.demands is not None
    assert parsed.demands.startswith("its own field [match on xxx") and len(parsed.demands) < 200
    msm = parse_query({"match": {"text": {"query": "a b", "minimum_should_match": huge}}})
    assert msm is not None and msm.demands is not None and len(msm.demands) < 200
    record = logging.LogRecord("kgqr.rewrite", logging.INFO, __file__, 1, huge, None, None)
    record.kgqr = {"explain": {"expansion": [huge], huge: 1}, "query": "heat"}
    written = JsonFormatter().format(record)
    assert len(written) < 4 * VALUE_CHARS + 1_000
    line = json.loads(written)
    assert line["kgqr"]["query"] == "heat" and line["kgqr"]["explain"]["expansion"][0].endswith(
        "... (clipped)"
    )


def test_a_fallback_warns_once_a_minute_per_strategy_and_stage(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many fallbacks are a caller's to cause (a query that names nothing in the graph):
    one caller's loop of them wrote a warning each, burying every other."""
    monkeypatch.setattr(rewriter, "_fallback_warnings", OnceEvery())
    caplog.set_level(logging.INFO, logger="kgqr")
    for _ in range(3):
        rewriter.record_fallback("graph", "seeds", "no seeds")
    rewriter.record_fallback("graph", "llm", "timed out")
    levels = [(r.levelname, r.kgqr["stage"]) for r in caplog.records]  # type: ignore[attr-defined]
    assert levels == [("WARNING", "seeds"), ("INFO", "seeds"), ("INFO", "seeds"),
                      ("WARNING", "llm")]  # fmt: skip
