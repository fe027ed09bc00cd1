"""JSON on the proxy's hot path: the engine's answers that kgqr decodes and writes again (a
rewritten search's hits, merged with its totals and facets), the requests it sends the
engine (each holds the query's vector) and the callers' bodies it reads.

Those answers carry each hit's whole `_source`, vectors too: ten MuSiQue hits with Gemma's
768 floats are 170 KB. The standard library took 2.7 ms to decode that and 3.7 ms to
write it again, on the event loop, in every rewritten search (10% of `base`'s p50 on this
machine); orjson takes 0.25 and 0.2.

orjson reads an integer beyond 64 bits as a float, which would change a caller's
document. So an answer holding an integer of 19 or more digits is read by the standard
library, as is one orjson refuses (a lone surrogate); a string of such digits sends it
there too, which only costs the slower reader. A number no JSON can hold once read (1e400,
NaN) is refused, as writing it back was before: the search then answers with the
engine's own bytes. orjson writes what it can, and the standard library the rest (an
integer beyond 64 bits, a lone surrogate), escaped to ASCII, which writes them all.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import orjson

# The longest integer orjson reads exactly has 20 digits (2**64 - 1), and some of 19 and 20
# it does not: an answer holding any integer of 19 digits or more goes to the standard
# library. Found by mapping every digit to 0, `.` to itself and every other byte to a
# space: an integer's digits then follow a space, a fraction's a dot (a stored vector's
# doubles, "0.0030592051334679127", are full of long fractions). A regular expression
# saying the same took 1.3-2 ms over 170 KB; this takes 0.26.
_DIGITS_AND_DOTS = bytes(
    ord("0") if chr(byte).isdigit() and byte < 128 else byte if byte == ord(".") else ord(" ")
    for byte in range(256)
)
_LONG_INTEGER = b" " + b"0" * 19


def loads(raw: bytes) -> Any:
    """The JSON value of `raw`, each number as the standard library reads it."""
    if _LONG_INTEGER not in (b" " + raw).translate(_DIGITS_AND_DOTS):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw, parse_float=_finite, parse_constant=_refused)


def loads_request(raw: bytes, rest_ignored: bool = False) -> Any:
    """A caller's body as the engine's parser reads it: an object holding a key twice is
    refused ("Duplicate field 'size'"), where taking the last (as `loads` does) ran a
    search the engine refuses. The standard library's hook sees each object's pairs;
    request bodies are small beside answers, and large ones are read off the event loop.
    `rest_ignored`: the first value only, whatever follows it (an msearch line: the
    engine reads its object and no further)."""
    if not rest_ignored:
        return json.loads(
            raw, parse_float=_finite, parse_constant=_refused, object_pairs_hook=_unique
        )
    encoding = json.detect_encoding(raw)
    if encoding == "utf-8-sig":  # the mark off, so that a bad byte's place is the body's
        raw, encoding = raw[3:], "utf-8"
    try:
        return _first_value(raw.decode(encoding, "surrogatepass"))
    except UnicodeDecodeError as bad:  # after the value, the engine never reads it
        try:
            return _first_value(raw[: bad.start].decode(encoding, "surrogatepass"))
        except ValueError:
            raise bad from None


def _first_value(text: str) -> Any:
    return _REQUEST_DECODER.raw_decode(text, len(text) - len(text.lstrip(" \t\r\n")))[0]


# Bytes a comment may not hold: the engine's reader refuses control characters in one.
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")
# Up to the next slash outside a string (or a string left open), strings skipped whole,
# possessively: the regex engine's loop, no backtracking, no step in Python per string.
_TO_A_SLASH = re.compile(rb'(?:[^"/]++|"(?:[^"\\]++|\\.)*+")*+', re.DOTALL)
_LINE_END = re.compile(rb"[\r\n]")


class UnclosedComment(ValueError):
    """A comment the body ends in: the engine's reader says "end-of-input in a comment"."""


@dataclass
class CommentBudget:
    """Comments one request's bodies may have taken out (an msearch's lines share one):
    each costs a step in Python, and a 10 MB body of them (10 KB gzipped) took seconds.
    A body with comments holds a few."""

    left: int = 10_000


def without_comments(raw: bytes, budget: CommentBudget | None = None) -> bytes:
    """`raw` with each comment outside its strings (`/* ... */`, and `// ...` to the line's
    end) made a space, as the engine's reader (Jackson with ALLOW_COMMENTS) skips them:
    it runs `{"size": 1 /* one */}`, which the standard library refuses. A lone slash or
    an unclosed string leave `raw` as it came, for the reader to refuse; an unclosed
    comment is UnclosedComment. One pass: each search starts where the last match ended."""
    budget = budget or CommentBudget()
    parts: list[bytes] = []
    copied = 0
    at = _TO_A_SLASH.match(raw).end()  # type: ignore[union-attr]  # matches the empty too
    while at < len(raw):
        if raw[at] == ord('"'):
            return raw  # a string left open
        start, opener = at, raw[at : at + 2]
        if opener in (b"/*", b"/"):  # a slash the body ends with opens a comment too
            closer = raw.find(b"*/", start + 2)
            if closer < 0:
                raise UnclosedComment("the body ends in a comment")
            at = closer + 2
        elif opener == b"//":
            line_end = _LINE_END.search(raw, start)
            at = line_end.start() if line_end is not None else len(raw)
        else:
            return raw
        budget.left -= 1
        if budget.left < 0:
            raise ValueError("more comments than kgqr takes out of one request's bodies")
        if _CONTROL.search(raw, start, at):
            raise ValueError("a comment holds a control character")
        parts += [raw[copied:start], b" "]
        copied = at
        at = _TO_A_SLASH.match(raw, at).end()  # type: ignore[union-attr]
    return b"".join([*parts, raw[copied:]]) if parts else raw


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"Duplicate field '{key}'")
            seen.add(key)
    return found


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} cannot be written back as JSON")
    return number


def _refused(text: str) -> float:
    raise ValueError(f"{text} is not JSON")


_REQUEST_DECODER = json.JSONDecoder(
    parse_float=_finite, parse_constant=_refused, object_pairs_hook=_unique
)


def dumps(content: Any) -> bytes:
    """`content` as compact JSON in UTF-8."""
    try:
        return orjson.dumps(content)
    except TypeError:  # orjson.JSONEncodeError is one
        return json.dumps(content, separators=(",", ":"), allow_nan=False).encode("ascii")
