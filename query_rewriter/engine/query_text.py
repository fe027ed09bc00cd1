"""Finding the user's query text inside an OpenSearch query, and the filters around it.

Understood: ``match``, ``match_phrase``, ``multi_match``, ``query_string``,
``simple_query_string``, and a ``bool`` whose ``must``/``should`` hold those (its
``filter`` and ``must_not`` clauses are kept as filters). Anything else is left alone:
the request then passes through unchanged; so does a query_string whose text is the query
language rather than words (query_syntax). A query that demands more of a hit than one
of its words (a phrase, `operator: and`, `minimum_should_match`, several required clauses)
is named in the explain (`kept_as_filter`).

The caller's query is kept whole (`ParsedQuery.query`): the rewrite's BM25 and k-NN sides
rank only what it matches, so no document the caller's words do not match comes back
because its vector was near. What the graph links to the query may be added, and is
counted in `hits.total` (original_facets.py); a search with aggregations, or a query that
demands more than a word, keeps even those to its matches, so its facets and total
describe exactly the hits a client pages through.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from query_rewriter.engine.query_syntax import MAX_QUERY_CHARS, quoted_phrase, syntax_used

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
    # [match_phrase]"): the graph then adds nothing outside its matches either.
    demands: str | None = None
    # The fields the caller's text clauses name, boosts kept (`content`, `title^2`), and
    # `*` for a clause that names none (the engine's default field); empty for a query
    # kgqr made itself.
    fields: tuple[str, ...] = ()
    # The caller's whole query: what the rewritten search ranks within. None for a query
    # kgqr made itself (a strategy's own searches).
    query: dict[str, Any] | None = None
    # A vector query's vector (a `knn` query on the KB's vector field, as LangChain's,
    # Haystack's and LlamaIndex's retrievers send): the caller embedded the text, so the
    # rewrite has this vector and no words (`text` only names it, for the cache).
    vector: tuple[float, ...] | None = None
    vector_k: int | None = None  # its k: the rewrite's k-NN side reads that many, no more

    def within(self, added: Collection[str] = ()) -> list[dict[str, Any]]:
        """The filters a rewritten clause runs under: the caller's whole query, which holds
        their filters (with `added`: their filters, and their query or one of the documents
        the graph added). Each rewritten search repeats this in several clauses, so nothing
        in it is sent twice: with the filters beside the query, a search of a large filter
        went to the engine 13 times its size."""
        if self.query is None:
            return list(self.filters)
        if not added:
            return [self.query]
        linked = {"ids": {"values": sorted(added)}}
        return [
            *self.filters,
            {"bool": {"should": [self.query, linked], "minimum_should_match": 1}},
        ]


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


# Where kgqr's own documents keep their words (plugin.field_map.OWN_TEXT_FIELDS), and
# every field (`*`, a query_string's default): a clause on one of these asks for the
# document's words. An attached index names its own (FieldMap.text_fields).
WORD_FIELDS = ("title", "text", "*")


def _named_fields(clause: dict[str, Any]) -> list[str]:
    """The fields a text clause names, boosts kept; none when it names none."""
    ((kind, body),) = clause.items()
    if kind in ("match", "match_phrase"):
        return [str(name) for name in body]
    return [str(name) for name in (*_as_list(body.get("fields")),
                                   *_as_list(body.get("default_field")))]  # fmt: skip


def _fields_of(clause: dict[str, Any]) -> list[str]:
    """The fields a text clause names, boosts stripped."""
    return [name.split("^")[0] for name in _named_fields(clause)]


QUOTED_CHARS = 100


def _quoted(value: Any) -> str:
    """The caller's own words in a demand, clipped: a demand is shown in the explain and
    logged with every rewrite, and a field name of a megabyte wrote a megabyte of log."""
    text = str(value)
    return text if len(text) <= QUOTED_CHARS else f"{text[:QUOTED_CHARS]}..."


def _demand_of(clause: dict[str, Any], word_fields: tuple[str, ...]) -> str | None:
    """What one text clause (_text_of has read it) asks beyond any one of its words."""
    ((kind, _),) = clause.items()
    options = _options(clause)
    other = [name for name in _fields_of(clause) if name not in word_fields]
    if other:  # `type: movie`, `title.raw`: not words the rewrite can look for elsewhere
        return f"its own field [{kind} on {_quoted(other[0])}]"
    if "analyzer" in options:
        return f"its own analyzer [{kind} analyzer {_quoted(options['analyzer'])}]"
    if kind == "match_phrase" or (kind == "multi_match" and options.get("type") == "phrase"):
        return f"a phrase [{kind}]"
    phrase = quoted_phrase(kind, options)
    if phrase:
        return f"a phrase [{kind} {_quoted(phrase)}]"
    operator = options.get("operator", options.get("default_operator"))
    if isinstance(operator, str) and operator.lower() == "and":
        return f"every word [{kind} operator and]"
    if "minimum_should_match" in options:
        msm = _quoted(options["minimum_should_match"])
        return f"several words [{kind} minimum_should_match {msm}]"
    return None


def _bool_demand(
    clauses: dict[str, Any], must: list[Any], should: list[Any], word_fields: tuple[str, ...]
) -> str | None:
    """What a bool of text clauses asks beyond any one word of any of them: its clauses'
    own demands, its minimum_should_match, or several clauses every hit must match."""
    if not must and clauses.get("filter") and "minimum_should_match" not in clauses:
        return None  # should clauses beside a filter are optional: it demands no word
    for clause in must or should:  # beside a must, should clauses are optional
        demand = _demand_of(clause, word_fields)
        if demand:
            return demand
    if "minimum_should_match" in clauses:
        msm = _quoted(clauses["minimum_should_match"])
        return f"several clauses [bool minimum_should_match {msm}]"
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


VECTOR_QUERY_OPTIONS = {"vector", "k", "filter", "boost"}
# The k-NN plugin's largest dimension (2.19): a longer vector is the engine's error to give,
# not one kgqr reads, hashes and copies first (2M floats held the event loop 0.8 s).
MAX_VECTOR_DIMENSION = 16_000
# The engine's `indices.query.bool.max_clause_count` by default: a bool with more text
# clauses is its error to give. Each was read (empty ones too, which no length limit
# counts): 10 MB of them held the event loop 1.2 s.
MAX_TEXT_CLAUSES = 1024


def parse_vector_query(query: Any, vector_field: str) -> ParsedQuery | None:
    """A `knn` query on `vector_field` with no option but `k`, a `filter` and `boost`,
    alone or as the one `must` clause of a bool (Haystack's) whose `filter` and `must_not`
    are kept; None for anything else (a radial search, other options)."""
    if not isinstance(query, dict):
        return None
    filters: list[dict[str, Any]] = []
    must_not: list[dict[str, Any]] = []
    knn = query
    if set(query) == {"bool"} and isinstance(query["bool"], dict):
        clauses = query["bool"]
        must = _as_list(clauses.get("must"))
        if not set(clauses) <= {"must", "filter", "must_not"} or len(must) != 1:
            return None
        knn, filters, must_not = (
            must[0],
            _as_list(clauses.get("filter")),
            _as_list(clauses.get("must_not")),
        )
    vector = _knn_vector(knn, vector_field)
    if vector is None:
        return None
    own_filter = knn["knn"][vector_field].get("filter")
    filters = [*filters, *([own_filter] if isinstance(own_filter, dict) else [])]
    digest = hashlib.sha1(json.dumps(vector).encode()).hexdigest()[:16]
    return ParsedQuery(f"vector query {digest}", filters, must_not, query=query,
                       vector=tuple(float(x) for x in vector),
                       vector_k=int(knn["knn"][vector_field]["k"]))  # fmt: skip


def _knn_vector(clause: Any, vector_field: str) -> list[Any] | None:
    """A `knn` clause's vector, if it is one kgqr reads (see parse_vector_query)."""
    if (
        not isinstance(clause, dict)
        or set(clause) != {"knn"}
        or not isinstance(clause["knn"], dict)
    ):
        return None
    if list(clause["knn"]) != [vector_field] or not isinstance(clause["knn"][vector_field], dict):
        return None
    options = clause["knn"][vector_field]
    vector, k = options.get("vector"), options.get("k")
    if not set(options) <= VECTOR_QUERY_OPTIONS or not isinstance(k, int) or k < 1:
        return None
    if not isinstance(vector, list) or not 0 < len(vector) <= MAX_VECTOR_DIMENSION:
        return None
    return vector if all(map(_finite_number, vector)) else None


def _finite_number(value: Any) -> bool:
    """A number a vector can hold: not a bool, NaN, an infinity, or an int too large for a
    float (which the engine refuses with its own error)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def parse_query(query: Any, word_fields: tuple[str, ...] = WORD_FIELDS) -> ParsedQuery | None:
    """The text to rewrite and the filters to keep, or None if kgqr should not touch it.
    `word_fields`: the fields that hold the knowledge base's words (and `*`)."""
    if not isinstance(query, dict):
        return None
    text = _text_of(query)
    if text is not None:
        if not text.strip():
            return None
        return _parsed(text.strip(), [query], _demand_of(query, word_fields), query)
    if set(query) != {"bool"} or not isinstance(query["bool"], dict):
        return None
    clauses = query["bool"]
    allowed = {"must", "should", "filter", "must_not", "minimum_should_match", "boost"}
    if not set(clauses) <= allowed:
        return None
    must, should = _as_list(clauses.get("must")), _as_list(clauses.get("should"))
    if len(must) + len(should) > MAX_TEXT_CLAUSES:
        return None
    texts, text_clauses = [], [*must, *should]
    for clause in text_clauses:
        text = _text_of(clause)
        if text is None:
            return None
        texts.append(text.strip())
    joined = " ".join(t for t in texts if t)
    if not joined:
        return None
    if len(joined) > MAX_QUERY_CHARS:
        # Passed through for its length (search/plan.py) before anything else is read of
        # it: scanned clause by clause, 2,500 clauses of 4,000 characters held the event
        # loop for 1.5 s.
        return ParsedQuery(joined, query=query)
    return _parsed(
        joined,
        text_clauses,
        _bool_demand(clauses, must, should, word_fields),
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
    """The caller's query, kept whole beside its filters (which it holds too; its text part
    alone could demand less than the bool does)."""
    return ParsedQuery(
        text,
        filters or [],
        must_not or [],
        _syntax_of(text_clauses),
        [clause for clause in text_clauses if _is_named(clause)],
        _fuzzy_of(text_clauses),
        demands,
        _fields_read(text_clauses),
        query,
    )


def _fields_read(clauses: list[dict[str, Any]]) -> tuple[str, ...]:
    """The fields text clauses name, and `*` for one that names none (it reads the
    engine's default field: every field)."""
    return tuple(
        dict.fromkeys(name for clause in clauses for name in _named_fields(clause) or ["*"])
    )
