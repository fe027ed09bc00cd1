"""Reading a request's body: bounded, and decompressed where kgqr must read it.

opensearch-py with ``http_compress=True`` (a common setting) gzips every request body and
says so in ``Content-Encoding``; OpenSearch accepts gzip and deflate. kgqr parses the bodies
of the searches it may rewrite, so it decompresses them first. The size limit applies to
the decompressed bytes too, so a small compressed body cannot expand without bound.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import AsyncIterable, Mapping
from typing import Any

import anyio

from query_rewriter.engine import json_codec
from query_rewriter.engine.errors import RewriteRequestError
from query_rewriter.search.plan import JSON_MEDIA_TYPES

# The codings the engine's HTTP layer (Netty's decompressor) undoes, and zlib's wbits for
# each: gzip framing; for deflate, zlib framing, or raw deflate when the body does not
# start with a zlib header, as Netty reads it.
GZIP_WBITS = 16 + zlib.MAX_WBITS
CODINGS = ("gzip", "x-gzip", "deflate", "x-deflate")


def too_large(limit: int) -> RewriteRequestError:
    return RewriteRequestError(
        413, "content_too_long_exception", f"request body is larger than {limit} bytes"
    )


async def read_body(declared_length: str | None, stream: AsyncIterable[bytes], limit: int) -> bytes:
    """The body as sent, refused with a 413 once it passes `limit` bytes."""
    if declared_length and declared_length.isdigit() and int(declared_length) > limit:
        raise too_large(limit)
    chunks, size = [], 0
    async for chunk in stream:
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def decode_body(body: bytes, content_encoding: str | None, limit: int) -> bytes:
    """The body with its Content-Encoding undone, at most `limit` bytes once decoded.

    One coding, as the engine reads it: a list ("gzip, gzip") the engine leaves undone and
    then fails to parse, and kgqr refuses it before inflating anything (each layer was
    bounded, but not their number: 300 layers of 8 MB held the event loop for a second)."""
    coding = (content_encoding or "").strip().lower()
    if coding in ("", "identity"):
        return body
    if coding not in CODINGS:
        raise RewriteRequestError(
            400,
            "illegal_argument_exception",
            f"unsupported Content-Encoding [{content_encoding}]; use one of gzip or deflate",
        )
    return _inflate(body, _wbits(coding, body), limit, coding)


def _wbits(coding: str, body: bytes) -> int:
    if coding.endswith("gzip"):
        return GZIP_WBITS
    # Netty's test (ZlibDecoder's looksLikeZlib): deflate with a 32 KB window, checksummed.
    header = int.from_bytes(body[:2], "big", signed=True) if len(body) >= 2 else 0
    zlib_header = header & 0x7800 == 0x7800 and header % 31 == 0
    return zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS


def _inflate(body: bytes, wbits: int, limit: int, coding: str) -> bytes:
    """`body` decoded as the engine decodes it: every gzip member (a second one was
    dropped: two JSON documents, the engine's 400, ran as the first)."""
    # Members joined once at the end: added to what came before one by one, each copied
    # all of it again (1,024 members of 10 KB, a 47 KB body, held the loop 3.4 s).
    members: list[bytes] = []
    decoded_bytes, rest = 0, body
    for _ in range(MAX_MEMBERS):
        inflater = zlib.decompressobj(wbits)
        try:
            members.append(inflater.decompress(rest, limit + 1 - decoded_bytes))
        except zlib.error as exc:
            raise RewriteRequestError(
                400, "parse_exception", f"request body is not valid {coding} data: {exc}"
            ) from exc
        decoded_bytes += len(members[-1])
        if decoded_bytes > limit:
            raise too_large(limit)
        if not inflater.eof:
            raise RewriteRequestError(400, "parse_exception", f"request body is truncated {coding}")
        rest = inflater.unused_data
        # After deflate's stream the engine reads nothing, and after a gzip member nothing
        # shorter than a member's header (a stray newline, padding).
        if len(rest) < GZIP_HEADER_BYTES or wbits != GZIP_WBITS:
            return b"".join(members)
    raise RewriteRequestError(
        400, "parse_exception", f"request body holds more than {MAX_MEMBERS} {coding} members"
    )


GZIP_HEADER_BYTES = 10
MAX_MEMBERS = 1024  # of one compressed body: each costs a decoder, and JSON needs one


SOURCE_PARAMS = ("source", "source_content_type")


def body_and_params(
    raw: bytes, query_params: Mapping[str, str]
) -> tuple[bytes, dict[str, str], bool]:
    """(body, URL parameters, whether the body came from the URL).

    OpenSearch reads a body-less request's body from the `source` parameter (with
    `source_content_type`), which GET-only clients rely on. kgqr reads it the same way, so
    such searches are rewritten too, and takes both out of the URL: sent on beside a body,
    the engine refuses them. Any other request, and a `source` that is not JSON or lacks
    its type (the engine's to answer, as it would directly), is returned as it came."""
    params = dict(query_params)
    if raw.strip() or "source" not in params:
        return raw, params, False
    media = params.get("source_content_type", "").split(";")[0].strip().lower()
    if media not in JSON_MEDIA_TYPES:
        return raw, params, False
    rest = {k: v for k, v in params.items() if k not in SOURCE_PARAMS}
    return params["source"].encode(), rest, True


# The deepest body kgqr reads, on purpose below what the engine parses. OpenSearch 2.19
# bounds no depth here (measured on this build): a query of ~330 nested bools (JSON ~1,000
# deep), or an aggregation's `meta` ~2,000 deep, overflowed the stack of the node that
# parsed it, and the node exited: one caller took every caller's searches down. Real
# queries nest a few dozen levels; a body between here and the crash is refused, which
# the engine would run.
MAX_NESTING = 128


def json_object(
    raw: bytes,
    what: str,
    rest_ignored: bool = False,
    comments: json_codec.CommentBudget | None = None,
) -> dict[str, Any]:
    """`raw` read as the engine reads a body, refused with the engine's error types: its
    reader's (`json_parse_exception`) for what is not JSON, its parser's
    (`parsing_exception`) for JSON that is not an object. `rest_ignored`: what follows
    the object is not read (an msearch line). `comments`: what may be taken out, shared
    by the bodies of one request."""
    if not raw.strip():
        return {}
    try:
        value = _read_json(raw, rest_ignored, comments)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise not_json(exc, what) from exc
    except RecursionError:  # beyond orjson's 1,024 levels, the standard library's stack
        raise too_deep(what) from None
    if nesting_depth(value, MAX_NESTING) > MAX_NESTING:
        raise too_deep(what)
    if not isinstance(value, dict):
        raise expected_an_object(JSON_TOKENS.get(type(value), "VALUE_NUMBER"))
    return value


def expected_an_object(found: str) -> RewriteRequestError:
    """The engine's 400 for a body (or an msearch line) that holds `found`, not an object."""
    return RewriteRequestError(
        400, "parsing_exception", f"Expected [START_OBJECT] but found [{found}]"
    )


# The engine's names for what a body held instead of an object.
JSON_TOKENS = {list: "START_ARRAY", str: "VALUE_STRING", bool: "VALUE_BOOLEAN",
               type(None): "VALUE_NULL"}  # fmt: skip
# ... and for a value that follows the body's object, by how it starts.
FOLLOWING_TOKENS = (
    *[("{", "START_OBJECT"), ("[", "START_ARRAY"), ('"', "VALUE_STRING")],
    *[("true", "VALUE_BOOLEAN"), ("false", "VALUE_BOOLEAN"), ("null", "VALUE_NULL")],
    *((digit, "VALUE_NUMBER") for digit in "-0123456789"),
)


def not_json(exc: ValueError, what: str) -> RewriteRequestError:
    """The engine's refusal of a body that does not read, where its type says what a
    client may act on: a value after the object (two bodies sent as one) is its parser's
    `parsing_exception`, a body cut short its reader's `json_e_o_f_exception`, the rest
    `json_parse_exception` (the wording is Python's, not Jackson's)."""
    if isinstance(exc, OnlyComments):
        return expected_an_object("null")
    if isinstance(exc, json_codec.UnclosedComment) or _cut_short(exc):
        return RewriteRequestError(
            400, "json_e_o_f_exception", f"{what} ends before its JSON does: {exc}"
        )
    if isinstance(exc, json.JSONDecodeError) and exc.msg == "Extra data":
        for start, token in FOLLOWING_TOKENS:
            if exc.doc.startswith(start, exc.pos):
                return RewriteRequestError(
                    400, "parsing_exception",
                    f"Unexpected token [{token}] found after the main object.",
                )  # fmt: skip
    return RewriteRequestError(400, "json_parse_exception", f"{what} is not valid JSON: {exc}")


def _cut_short(exc: ValueError) -> bool:
    """Whether the body ended inside its JSON: in a value, a string or a character."""
    if isinstance(exc, UnicodeDecodeError):
        return exc.reason == "unexpected end of data"
    if not isinstance(exc, json.JSONDecodeError) or exc.msg == "Extra data":
        return False
    return exc.msg.startswith("Unterminated string") or exc.pos >= len(exc.doc.rstrip(" \t\r\n"))


class OnlyComments(ValueError):
    """A body of comments alone: to the engine, a body without its object."""


def _read_json(raw: bytes, rest_ignored: bool, comments: json_codec.CommentBudget | None) -> Any:
    """json_codec's reading: a number no JSON can hold (NaN, 1e400) is refused here, as
    the engine refuses it, not sent on as the null orjson would write for it. Comments,
    which the engine skips, are taken out only when the JSON does not read without them:
    that is rare, and the scan costs a pass over the body."""
    try:
        return json_codec.loads_request(raw, rest_ignored)
    except ValueError:
        uncommented = json_codec.without_comments(raw, comments) if b"/" in raw else raw
        if uncommented is raw:
            raise
    raw.decode("utf-8", "surrogatepass")  # not UTF-8 in a comment: the engine refuses it
    if not uncommented.strip():
        raise OnlyComments("the body holds comments only")
    return json_codec.loads_request(uncommented, rest_ignored)


def too_deep(what: str) -> RewriteRequestError:
    return RewriteRequestError(
        400, "parse_exception", f"{what} nests deeper than {MAX_NESTING} levels"
    )


def nesting_depth(value: Any, enough: int) -> int:
    """How deep objects and arrays nest in `value` (a scalar is 0), counted without
    recursion and no further than `enough` + 1."""
    deepest = 0
    below: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, dict | list) else []
    while below and deepest <= enough:
        node, depth = below.pop()
        deepest = max(deepest, depth)
        children = node.values() if isinstance(node, dict) else node
        below.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


async def decoded_off_the_loop(body: bytes, content_encoding: str | None, limit: int) -> bytes:
    """decode_body, on a worker thread when there is anything to inflate: what a body
    inflates to is the caller's choice up to `limit`, and 10 MB of it takes tens of
    milliseconds that every other search would wait on the loop."""
    if (content_encoding or "").strip().lower() in ("", "identity"):
        return body
    return await anyio.to_thread.run_sync(decode_body, body, content_encoding, limit)
