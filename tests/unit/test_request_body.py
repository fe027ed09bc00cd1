"""Request bodies kgqr must read: decompressed as OpenSearch would, bounded once decoded,
and taken from the URL's `source` where OpenSearch takes them from."""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib

import httpx
import pytest

from query_rewriter.engine.errors import RewriteRequestError
from query_rewriter.engine.gateway import EngineSession
from query_rewriter.engine.json_codec import CommentBudget
from query_rewriter.proxy.request_body import (
    MAX_NESTING,
    body_and_params,
    decode_body,
    json_object,
    nesting_depth,
)

BODY = b'{"query": {"match": {"text": "heat"}}}'


def _raw_deflate(data: bytes) -> bytes:
    """Deflate without zlib's header, which the engine reads as deflate too."""
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


@pytest.mark.parametrize(
    ("encoding", "packed"),
    [
        (None, BODY),
        ("identity", BODY),
        ("gzip", gzip.compress(BODY)),
        ("GZIP", gzip.compress(BODY)),
        ("deflate", zlib.compress(BODY)),
        ("x-deflate", zlib.compress(BODY)),
        ("deflate", _raw_deflate(BODY)),
        ("x-gzip", gzip.compress(BODY)),
    ],
)
def test_encoded_bodies_are_decoded(encoding: str | None, packed: bytes) -> None:
    assert decode_body(packed, encoding, limit=1000) == BODY


def _refusal(packed: bytes, encoding: str, limit: int = 1000) -> RewriteRequestError:
    with pytest.raises(RewriteRequestError) as caught:
        decode_body(packed, encoding, limit)
    return caught.value


def test_a_small_body_that_expands_past_the_limit_is_refused() -> None:
    bomb = gzip.compress(b" " * 10_000_000)
    assert len(bomb) < 20_000
    refused = _refusal(bomb, "gzip", limit=1_000_000)
    assert refused.status == 413 and refused.error_type == "content_too_long_exception"


def test_broken_truncated_and_unknown_encodings_are_clear_400s() -> None:
    assert _refusal(b"not gzip at all", "gzip").error_type == "parse_exception"
    truncated = _refusal(gzip.compress(BODY)[:-12], "gzip")
    assert truncated.status == 400 and "truncated" in truncated.reason
    unknown = _refusal(BODY, "br")
    assert unknown.status == 400 and "[br]" in unknown.reason
    # The engine leaves a list of codings undone and fails to parse what is left.
    listed = _refusal(gzip.compress(gzip.compress(BODY)), "gzip, gzip")
    assert listed.status == 400 and "[gzip, gzip]" in listed.reason


def test_a_body_in_the_url_is_read_where_opensearch_reads_it() -> None:
    source = {"source": BODY.decode(), "source_content_type": "application/json", "size": "2"}
    assert body_and_params(b"", source) == (BODY, {"size": "2"}, True)
    ndjson = {**source, "source_content_type": "application/x-ndjson; charset=UTF-8"}
    assert body_and_params(b" \n", ndjson) == (BODY, {"size": "2"}, True)
    # A body wins (the engine then refuses the extra parameters); without a type, or of
    # a type kgqr does not parse, the engine answers as it would directly.
    assert body_and_params(BODY, source) == (BODY, source, False)
    untyped = {"source": BODY.decode()}
    assert body_and_params(b"", untyped) == (b"", untyped, False)
    as_yaml = {**source, "source_content_type": "application/yaml"}
    assert body_and_params(b"", as_yaml) == (b"", as_yaml, False)
    assert body_and_params(b"", {"size": "2"}) == (b"", {"size": "2"}, False)


@pytest.mark.parametrize("raw", [b'{"query": {"range": {"n": {"gte": NaN}}}}', b'{"size": 1e400}'])
def test_a_number_json_cannot_hold_is_a_400(raw: bytes) -> None:
    """Sent on, orjson would write it as null: a query the caller did not send."""
    with pytest.raises(RewriteRequestError) as refused:
        json_object(raw, "the body")
    assert refused.value.status == 400


def nested(depth: int) -> bytes:
    """A search body whose JSON nests `depth` levels (the body itself is the first)."""
    query = '{"match_all":{}}'
    for _ in range(depth - 3):
        query = '{"bool":' + query + "}"
    return ('{"query":' + query + "}").encode()


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 1_000, 1_030, 50_000])
def test_a_body_nested_past_the_bound_is_a_400_however_deep(depth: int) -> None:
    """OpenSearch 2.19 parsing ~1,000 levels of query overflows its stack and the node
    exits; the standard library's reader and writer fail at about the same depth."""
    assert nesting_depth(json.loads(nested(min(depth, 900))), 10_000) == min(depth, 900)
    with pytest.raises(RewriteRequestError) as refused:
        json_object(nested(depth), "the body")
    assert refused.value.status == 400
    assert f"deeper than {MAX_NESTING}" in refused.value.reason


def test_a_body_at_the_bound_is_read() -> None:
    assert nesting_depth(json_object(nested(MAX_NESTING), "the body"), 10_000) == MAX_NESTING


def test_engine_requests_keep_the_callers_content_type() -> None:
    """A JSON body kgqr writes goes with the caller's content type when they gave one (the
    engine refuses a search sent as text/plain, directly and so through kgqr), else JSON."""
    sent: list[tuple[str | None, bytes]] = []

    def engine(request: httpx.Request) -> httpx.Response:
        sent.append((request.headers.get("content-type"), request.content))
        return httpx.Response(200, json={})

    async def send(headers: dict[str, str]) -> None:
        async with httpx.AsyncClient(
            transport=httpx.MockTransport(engine), base_url="http://e"
        ) as c:
            await EngineSession(c, headers).send("POST", "/i/_search", json={"size": 1})

    asyncio.run(send({"Content-Type": "text/plain"}))
    asyncio.run(send({}))
    assert sent == [("text/plain", b'{"size":1}'), ("application/json", b'{"size":1}')]


def test_a_body_is_read_with_its_comments_as_the_engine_reads_it() -> None:
    commented = b'{"size": 1, /* the page */ "query": {"match": {"text": "a // b"}}} // end'
    assert json_object(commented, "the body") == {"size": 1, "query": {"match": {"text": "a // b"}}}


@pytest.mark.parametrize(
    ("raw", "error_type", "reason"),
    [
        (b"{not json", "json_parse_exception", "the body is not valid JSON"),
        (b'{"size": 1} /* open', "json_e_o_f_exception", "the body ends before its JSON does"),
        (b'{"size": 1', "json_e_o_f_exception", "the body ends before its JSON does"),
        (b'{"size": 1} {"size": 2}', "parsing_exception", "Unexpected token [START_OBJECT]"),
        (b'{"size": 1} nul', "json_parse_exception", "the body is not valid JSON"),
        (b'{"q": {"match": {"title": "hel', "json_e_o_f_exception", "the body ends before"),
        (b'{"size": 1\x0c', "json_parse_exception", "the body is not valid JSON"),
        (b"/* only */ // this", "parsing_exception", "Expected [START_OBJECT] but found [null]"),
        (b'{"size": 1 /* \x01 */}', "json_parse_exception", "the body is not valid JSON"),
        (b'{"size": 1 /* \xff */}', "json_parse_exception", "the body is not valid JSON"),
        (b'["a"]', "parsing_exception", "Expected [START_OBJECT] but found [START_ARRAY]"),
        (b"null", "parsing_exception", "Expected [START_OBJECT] but found [VALUE_NULL]"),
        (b"3", "parsing_exception", "Expected [START_OBJECT] but found [VALUE_NUMBER]"),
    ],
)
def test_a_body_that_is_no_json_object_is_refused_in_the_engines_types(
    raw: bytes, error_type: str, reason: str
) -> None:
    with pytest.raises(RewriteRequestError) as refused:
        json_object(raw, "the body")
    assert (refused.value.status, refused.value.error_type) == (400, error_type)
    assert refused.value.reason.startswith(reason)


def test_an_msearch_line_is_read_to_the_end_of_its_object_as_the_engine_reads_it() -> None:
    """The engine reads a line's object and no further: what follows is not its error."""
    line = b'{"size": 1} {"size": 2} and more'
    assert json_object(line, "msearch line 2", rest_ignored=True) == {"size": 1}
    # Read as a whole body is: a byte-order mark, a surrogate encoded in a string.
    marked = b'\xef\xbb\xbf{"q": "\xed\xa0\x80"} \xff'
    assert json_object(marked, "msearch line 2", rest_ignored=True) == {"q": "\ud800"}
    assert json_object(b'{"size": 1 /* \xed\xa0\x80 */}', "the body") == {"size": 1}
    with pytest.raises(RewriteRequestError):
        json_object(line, "the body")


def test_taking_comments_out_of_a_requests_bodies_is_bounded() -> None:
    """10 KB of gzip inflating to 10 MB of `//` lines took 3.4 s of one core; a request's
    bodies (an msearch's lines share one budget) give up after CommentBudget's comments.
    Strings cost no step: a body of 100,000 strings and one comment is read."""
    budget = CommentBudget()
    line = b"{" + b"//\n" * (budget.left // 2) + b"}"
    assert json_object(line, "msearch line 2", comments=budget) == {}
    with pytest.raises(RewriteRequestError) as refused:
        json_object(line + b"//\n" * 2, "msearch line 4", comments=budget)
    assert "more comments than kgqr takes out" in refused.value.reason
    strings = b'{"a": [' + b'"x",' * 100_000 + b'"y"] /* one */}'
    assert len(json_object(strings, "the body")["a"]) == 100_001
