"""The proxy's JSON for large engine answers: orjson's speed, the standard library's numbers."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from query_rewriter.engine import json_codec

TRICKY = [
    b'{"n": 123456789012345678901234}',  # beyond 64 bits: orjson would make it a float
    b"[18446744073709551616, -9223372036854775809, 1.5]",
    b"1234567890123456789012",  # a bare integer, first in the text
    b'{"v": [0.0030592051334679127, -0.00011749114491976798]}',  # a vector's long fractions
    b'{"id": "12345678901234567890"}',
    b"[1234567890123456789012.5, 1e-05]",
    b'["\\ud800"]',  # orjson refuses a lone surrogate
    '{"title": "Zürich", "n": 0}'.encode(),
]


@pytest.mark.parametrize("raw", TRICKY)
def test_loads_reads_numbers_as_the_standard_library(raw: bytes) -> None:
    assert repr(json_codec.loads(raw)) == repr(json.loads(raw))


@pytest.mark.parametrize("raw", [b"[1e400]", b"[-1e999]", b'{"x": NaN}', b"[Infinity]"])
def test_loads_refuses_a_number_no_json_can_hold(raw: bytes) -> None:
    """Read, it could not be written back: the search answers with the engine's bytes."""
    with pytest.raises(ValueError):
        json_codec.loads(raw)


def test_a_vector_answer_is_read_by_orjson(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of the module: long fractions alone do not send an answer to the slow path."""

    def refused(raw: bytes) -> Any:
        raise AssertionError("read by the standard library")

    monkeypatch.setattr(json, "loads", refused)
    answer = b'{"hits": {"hits": [{"_source": {"vector": [0.0030592051334679127, -0.068]}}]}}'
    assert json_codec.loads(answer)["hits"]["hits"][0]["_source"]["vector"][0] == pytest.approx(
        0.0030592051334679127
    )


def test_a_long_integer_is_never_read_by_orjson(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(raw: bytes) -> Any:
        raise AssertionError("read by orjson")

    monkeypatch.setattr(orjson, "loads", refused)
    assert json_codec.loads(b'{"a": [1, -99999999999999999999]}') == {
        "a": [1, -99999999999999999999]
    }


@pytest.mark.parametrize(
    "content",
    [
        {"n": 2**70, "m": -(2**70)},  # orjson refuses: written by the standard library
        {"title": "Zürich", "v": [0.1, 1e-05, None, True]},
        {"hits": {"total": {"value": 3}, "hits": []}},
        {"title": "\ud800 alone", "n": 2**70},  # both refused by orjson: escaped to ASCII
    ],
)
def test_dumps_round_trips(content: dict[str, Any]) -> None:
    written = json_codec.dumps(content)
    assert isinstance(written, bytes)
    assert json.loads(written) == content


def test_dumps_writes_utf8_unescaped() -> None:
    assert json_codec.dumps({"title": "Zürich"}) == '{"title":"Zürich"}'.encode()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"size": 1 /* one */}', b'{"size": 1  }'),
        (b'{"size": 1, // one\n"q": 2}', b'{"size": 1,  \n"q": 2}'),
        (b'{"q": "a // b /* c */"}', b'{"q": "a // b /* c */"}'),  # in a string: text
        (b'{"q": "\\"/*"} /* x */', b'{"q": "\\"/*"}  '),  # an escaped quote ends nothing
        (b"/**/{}//", b" {} "),
        (b"{} / 1", b"{} / 1"),  # a lone slash, an unclosed string: the reader's to refuse
        (b'{"q": "open /* x */', b'{"q": "open /* x */'),
    ],
)
def test_comments_outside_strings_become_spaces(raw: bytes, expected: bytes) -> None:
    assert json_codec.without_comments(raw) == expected


@pytest.mark.parametrize("raw", [b"{} /* open", b'{"a": 1} /', b"{} /*/"])
def test_a_body_ending_in_a_comment_is_refused_as_such(raw: bytes) -> None:
    with pytest.raises(json_codec.UnclosedComment):
        json_codec.without_comments(raw)


def test_taking_comments_out_costs_linear_time() -> None:
    """Unclosed openers, or strings, one after another: each scan starts where the last
    ended, so doubling the body doubles the time (a rescan from each would quadruple it)."""
    import contextlib
    import time

    def seconds(raw: bytes) -> float:
        timings = []
        for _ in range(3):
            started = time.perf_counter()
            with contextlib.suppress(json_codec.UnclosedComment):
                json_codec.without_comments(raw)
            timings.append(time.perf_counter() - started)
        return min(timings)

    for unit in (b'"x" /**/ ', b"/*/*", b'"\\\\\\"' * 3):
        small, large = unit * 500, unit * 4_000  # within a CommentBudget
        assert seconds(large) < 4 * 8 * seconds(small), unit  # 8x the body; 64x if quadratic
