"""Finding the user's query text inside an OpenSearch query, and the filters around it.

Understood: ``match``, ``match_phrase``, ``multi_match``, ``query_string``,
``simple_query_string``, and a ``bool`` whose ``must``/``should`` hold those (its
``filter`` and ``must_not`` clauses are kept as filters). Anything else is left alone:
the request then passes through unchanged; so does a query_string whose text is the query
language rather than words (query_syntax). A query that demands more of a hit than one
of its words (a phrase, `operator: and`, `minimum_should_match`, several required clauses)
is kept whole as a filter too: the rewrite ranks within what the caller asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from query_rewriter.engine.query_syntax import quoted_phrase, syntax_used

TEXT_QUERIES = ("match", "match_phrase", "multi_match", "query_string", "simple_query_string")


@dataclass(frozen=True)
class ParsedQuery:
    text: str
    filters: list[dict[str, Any]] = field(default_factory=list)
    must_not: list[dict[str, Any]] = field(default_factory=list)
    # What in the text is query_string syntax ("a field name [title:x]"): kgqr would read
    # it as words, so such a search passes through (search_request).
    syntax: str | None = None
    # The caller's text clauses that carry a `_name`: a rewritten search keeps them at no
    # score, so its hits still say which of them they match (`matched_queries`).
    named: list[dict[str, Any]] = field(default_factory=list)
    # The caller's typo tolerance (`fuzziness` and its options on a match / multi_match),
    # kept on the rewritten BM25 side: without it "Cristofer Nolen" matched nothing there.
    fuzzy: dict[str, Any] = field(default_factory=dict)
    # What the caller's query demands of every hit beyond one of its words ("a phrase
    # [match_phrase]"); the query is then among `filters`, so the hits through kgqr are
    # hits of the caller's query (k-NN neighbours without the phrase came back, under a
    # total counting only the hits with it).
    demands: str | None = None


def _text_of(clause: dict[str, Any]) -> str | None:
    if not isinstance(clause, dict) or len(clause) != 1:
        return None
    ((kind, body),) = clause.items()
    if kind not in TEXT_QUERIES or not isinstance(body, dict):
        return None
    if kind in ("multi_match", "query_string", "simple_query_string"):
        query = body.get("query")
        return query if isinstance(query, str) else None
    if len(body) != 1:
        return None
    (value,) = body.values()
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("query"), str):
        return str(value["query"])
    return None


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


FUZZY_OPTIONS = ("fuzziness", "prefix_length", "max_expansions", "fuzzy_transpositions")


def _options(clause: dict[str, Any]) -> dict[str, Any]:
    """A text clause's options (_text_of has read it): a match's are under its field."""
    ((kind, body),) = clause.items()
    if kind in ("match", "match_phrase"):
        (body,) = body.values()
    return body if isinstance(body, dict) else {}


def _is_named(clause: dict[str, Any]) -> bool:
    return "_name" in _options(clause)


def _fuzzy_of(clauses: list[dict[str, Any]]) -> dict[str, Any]:
    """The first fuzzy match's options (a query_string's `fuzziness` applies only to its
    `~` terms, which pass through as syntax)."""
    for clause in clauses:
        ((kind, _),) = clause.items()
        options = _options(clause)
        if kind in ("match", "multi_match") and "fuzziness" in options:
            return {name: options[name] for name in FUZZY_OPTIONS if name in options}
    return {}


# Where the rewrite looks for words (hybrid_query.TEXT_FIELDS), and every field (`*`, a
# query_string's default): a clause on one of these asks for the document's words.
WORD_FIELDS = ("title", "text", "*")


def _fields_of(clause: dict[str, Any]) -> list[str]:
    """The fields a text clause names, boosts stripped; none when it names none."""
    ((kind, body),) = clause.items()
    if kind in ("match", "match_phrase"):
        return list(body)
    named = [*_as_list(body.get("fields")), *_as_list(body.get("default_field"))]
    return [str(name).split("^")[0] for name in named]


def _demand_of(clause: dict[str, Any]) -> str | None:
    """What one text clause (_text_of has read it) asks beyond any one of its words."""
    ((kind, _),) = clause.items()
    options = _options(clause)
    other = [name for name in _fields_of(clause) if name not in WORD_FIELDS]
    if other:  # `type: movie`, `title.raw`: not words the rewrite can look for elsewhere
        return f"its own field [{kind} on {other[0]}]"
    if "analyzer" in options:
        return f"its own analyzer [{kind} analyzer {options['analyzer']}]"
    if kind == "match_phrase" or (kind == "multi_match" and options.get("type") == "phrase"):
        return f"a phrase [{kind}]"
    phrase = quoted_phrase(kind, options)
    if phrase:
        return f"a phrase [{kind} {phrase}]"
    operator = options.get("operator", options.get("default_operator"))
    if isinstance(operator, str) and operator.lower() == "and":
        return f"every word [{kind} operator and]"
    if "minimum_should_match" in options:
        return f"several words [{kind} minimum_should_match {options['minimum_should_match']}]"
    return None


def _bool_demand(clauses: dict[str, Any], must: list[Any], should: list[Any]) -> str | None:
    """What a bool of text clauses asks beyond any one word of any of them: its clauses'
    own demands, its minimum_should_match, or several clauses every hit must match."""
    if not must and clauses.get("filter") and "minimum_should_match" not in clauses:
        return None  # should clauses beside a filter are optional: it demands no word
    for clause in must or should:  # beside a must, should clauses are optional
        demand = _demand_of(clause)
        if demand:
            return demand
    if "minimum_should_match" in clauses:
        return f"several clauses [bool minimum_should_match {clauses['minimum_should_match']}]"
    if len(must) > 1 or (must and should):
        return "every must clause [bool must]"
    return None


def _syntax_of(clauses: list[dict[str, Any]]) -> str | None:
    """The first query-language construct in text clauses _text_of has read."""
    for clause in clauses:
        ((kind, body),) = clause.items()
        found = syntax_used(kind, body)
        if found:
            return found
    return None


def parse_query(query: Any) -> ParsedQuery | None:
    """The text to rewrite and the filters to keep, or None if kgqr should not touch it."""
    if not isinstance(query, dict):
        return None
    text = _text_of(query)
    if text is not None:
        if not text.strip():
            return None
        return _parsed(text.strip(), [query], _demand_of(query), query)
    if set(query) != {"bool"} or not isinstance(query["bool"], dict):
        return None
    clauses = query["bool"]
    allowed = {"must", "should", "filter", "must_not", "minimum_should_match", "boost"}
    if not set(clauses) <= allowed:
        return None
    must, should = _as_list(clauses.get("must")), _as_list(clauses.get("should"))
    texts, text_clauses = [], [*must, *should]
    for clause in text_clauses:
        text = _text_of(clause)
        if text is None:
            return None
        texts.append(text.strip())
    joined = " ".join(t for t in texts if t)
    if not joined:
        return None
    return _parsed(
        joined,
        text_clauses,
        _bool_demand(clauses, must, should),
        query,
        _as_list(clauses.get("filter")),
        _as_list(clauses.get("must_not")),
    )


def _parsed(
    text: str,
    text_clauses: list[dict[str, Any]],
    demands: str | None,
    query: dict[str, Any],
    filters: list[dict[str, Any]] | None = None,
    must_not: list[dict[str, Any]] | None = None,
) -> ParsedQuery:
    """The whole caller's query joins the filters when it demands more than a word (its
    own filter and must_not are then there twice, harmless; its text part alone could
    demand what the bool does not)."""
    return ParsedQuery(
        text,
        [*(filters or []), *([query] if demands else [])],
        must_not or [],
        _syntax_of(text_clauses),
        [clause for clause in text_clauses if _is_named(clause)],
        _fuzzy_of(text_clauses),
        demands,
    )
