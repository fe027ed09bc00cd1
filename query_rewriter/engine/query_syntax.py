"""Whether a query_string / simple_query_string text is plain words or the query language.

kgqr rewrites the words a caller typed. In a query_string the text may instead say which
documents must not match (`film -Nolan`, `NOT x`), which field to look in (`title:x`), or a
pattern (`Nol*`); read as words, `film -Nolan` was rewritten into a search for Nolan (his
page came first) and `Nol*` into the nearest neighbours of the letters "Nol". Such a search
is the engine's to read, so it passes through; only plain words (and quoted phrases, which
like a `match_phrase` are rewritten within their own hits: query_text) are rewritten. So
does a multi_match of the prefix types search UIs send as the user types ("dark kni" found
*Kisaan* first, not *The Dark Knight*).

Two allowances keep natural questions rewritable: a question mark ending the text or
followed by a space is punctuation, not the engine's one-letter wildcard; and `-`, `+`
inside a word (`Spider-Man`, `C++`) are part of it, as the engine reads them.
"""

from __future__ import annotations

import re
from typing import Any

# The Lucene classic syntax OpenSearch's query_string reads, outside quoted phrases. Each
# pattern that scans a word (`\S*`) is anchored at the word's start (`(?<!\S)`): unanchored,
# a search retried from every letter of a long word and scanned to its end each time, so a
# 16 KB word took seconds of the event loop; anchored, each word is scanned a bounded
# number of times (tests/unit/test_hostile_input.py measures it).
WORD = r"(?<!\S)"
QUERY_STRING_SYNTAX = (
    (re.compile(r"(?:^|[\s(])([+\-!]\S*)"), "a +, - or ! operator"),
    (re.compile(r"(?<!\S)(AND|OR|NOT)(?!\S)|(&&|\|\|)"), "a boolean operator"),
    (re.compile(WORD + r"(\S*[^\s\\]:\S*)"), "a field name"),
    (re.compile(WORD + r"(\S*(?:\*|\?(?=\S))\S*)"), "a wildcard"),
    (re.compile(WORD + r"(\S*[~^]\S*)"), "fuzziness, proximity or a boost"),
    (
        re.compile(WORD + r"(\S*[()\[\]{}/\\<>=!]\S*)"),
        "grouping, a range, a regular expression or an escape",
    ),
)
# simple_query_string's operators (its `flags` may switch them off: then all is words).
SIMPLE_QUERY_STRING_SYNTAX = (
    (re.compile(r"(?:^|[\s(])([+\-]\S*)"), "a + or - operator"),
    (re.compile(WORD + r"(\S*\|\S*)"), "a | operator"),
    (re.compile(WORD + r"(\S*\*(?!\S)\S*)"), "a prefix wildcard"),
    (re.compile(WORD + r"(\S*[~()\\]\S*)"), "fuzziness, slop, grouping or an escape"),
)
# Search-as-you-type: the last word is a prefix ("dark kni"), which no rewrite reads.
PREFIX_TYPES = ("phrase_prefix", "bool_prefix")
PHRASE = re.compile(r'"[^"]*"')


def _outside_phrases(text: str) -> str | None:
    """The text with each quoted phrase blanked (its words are words), or None when a
    quote is left open (the engine's to read: it answers a parse error)."""
    blanked = PHRASE.sub(lambda found: " " * len(found.group()), text)
    return None if '"' in blanked else blanked


# Texts longer than this are never rewritten (they pass through, as syntax here and by
# length in search_request), so they are not scanned either: linear or not, a 10 MB text
# held the event loop for a second.
MAX_QUERY_CHARS = 4096


def _syntax_text(kind: str, body: dict[str, Any]) -> str | None:
    """The text of a query the engine reads as its query language, or None."""
    text = body.get("query")
    if kind not in ("query_string", "simple_query_string") or not isinstance(text, str):
        return None
    if kind == "simple_query_string" and str(body.get("flags", "ALL")).upper() == "NONE":
        return None  # every operator off: all is words
    return text


def syntax_used(kind: str, body: dict[str, Any]) -> str | None:
    """What in a text query says more than its words ("query_string syntax, a field name
    [title:x]"), or None when it is plain words."""
    if kind == "multi_match" and body.get("type") in PREFIX_TYPES:
        return f"a prefix match (multi_match type {body['type']})"
    text = _syntax_text(kind, body)
    if text is None:
        return None
    if len(text) > MAX_QUERY_CHARS:  # measured as sent: padding must not hide syntax
        return f"{kind} of {len(text)} characters, longer than kgqr reads ({MAX_QUERY_CHARS})"
    outside = _outside_phrases(text)
    if outside is None:
        return f'{kind} syntax, an unclosed quote ["]'
    rules = QUERY_STRING_SYNTAX if kind == "query_string" else SIMPLE_QUERY_STRING_SYNTAX
    for pattern, construct in rules:
        found = pattern.search(outside)
        if found:
            token = next(group for group in found.groups() if group)
            return f"{kind} syntax, {construct} [{token}]"
    return None


def quoted_phrase(kind: str, body: dict[str, Any]) -> str | None:
    """The first quoted phrase of several words in a query_string / simple_query_string
    text: a hit must hold those words together, not any one of them."""
    text = _syntax_text(kind, body)
    if text is None or len(text) > MAX_QUERY_CHARS:  # such a text passes through anyway
        return None
    return next((found for found in PHRASE.findall(text) if len(found.split()) > 1), None)
