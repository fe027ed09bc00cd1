"""Deciding what to do with one search: which knowledge base, which strategy, which text.

Per request a client may choose a strategy with the query parameter ``kgqr.strategy`` or
an ``ext.kgqr`` object in the body (removed before forwarding), ask for an explanation
with ``kgqr.explain=true`` / ``ext.kgqr.explain``, and override parameters with
``kgqr.param.alpha=0.5`` / ``ext.kgqr.params``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kgqr_core.embedder_models import default_strategy as default_strategy_for
from plugin.field_map import FieldMap
from plugin.kb_meta import KbDefault
from plugin.schema import kb_of_documents_index
from query_rewriter.engine.answer_format import FORMAT_PARAMS, AnswerFormat, opensearch_flag
from query_rewriter.engine.errors import RewriteRequestError
from query_rewriter.engine.json_codec import dumps
from query_rewriter.engine.query_syntax import MAX_QUERY_CHARS
from query_rewriter.engine.query_text import (
    WORD_FIELDS,
    ParsedQuery,
    parse_query,
    parse_vector_query,
)
from query_rewriter.search.explain import Explain
from query_rewriter.search.kb_indices import SearchTarget
from query_rewriter.strategies import ALL_PARAMS, AUTO_DEFAULT, STRATEGIES, known_strategy
from query_rewriter.strategies.base import Strategy
from query_rewriter.strategies.params import HYBRID_BM25, request_params

# A rewritten search repeats the caller's query in each of its parts, about 9 times its
# size in all: a query larger than this (a filter of some 50,000 ids) is sent as it is.
MAX_REWRITTEN_QUERY_BYTES = 1024 * 1024


EXPLAINED_DEFAULT_FIELDS = set(KbDefault.model_fields) - {"evidence"}


@dataclass
class SearchPlan:
    """A search kgqr will rewrite, with the strategy it resolved (not its name: everything
    downstream asks the strategy itself what it reads and whether it calls the LLM)."""

    index: str
    kb: str
    strategy: Strategy
    parsed: ParsedQuery
    body: dict[str, Any]
    explain: bool
    params: dict[str, float] = field(default_factory=dict)  # namespaced (strategies.params)
    # Deprecated parameter spellings the request used; a KB default this kgqr cannot run.
    warnings: tuple[str, ...] = ()
    # The caller's URL parameters the engine reads, kgqr's own removed, for an answer in
    # plain JSON (kgqr writes the caller's format): read here once, so nothing downstream
    # sees the raw query string.
    sent_params: dict[str, str] = field(default_factory=dict)
    # BM25's share of the hybrid as the request set it (`hybrid.bm25`); None: the
    # installed pipeline's weights, the settings'.
    bm25: float | None = None
    answer: AnswerFormat = field(default_factory=AnswerFormat)  # the caller's format
    fields: FieldMap | None = None  # an attached index's field map; None: kgqr's own
    # The KB's own default, when the search named no strategy and the KB has one.
    kb_default: KbDefault | None = None
    # The search named no strategy and `auto` chose one for the KB's embedder: that model
    # ("" for none known).
    auto_for: str | None = None
    # ... and its vectors re-rank only BM25's top hits (`kgqr kb embed`'s side index).
    auto_side_vectors: bool = False

    def default_explained(self) -> dict[str, Any] | None:
        """Which default served a search that named no strategy, its version and why."""
        if self.kb_default is not None:
            # What this kgqr declares only: a newer one's fields (kept in the record for it)
            # would reach callers the explain withholds kgqr-meta's details from.
            return self.kb_default.model_dump(include=EXPLAINED_DEFAULT_FIELDS)
        if self.auto_for is not None:
            model = self.auto_for or "no known model"
            reason = (
                f"what cross-validated dev evidence supports for a knowledge base of "
                f"{model}'s vectors (docs/relevance.md, the global default)"
            )
            if self.auto_side_vectors:
                reason = (
                    "the KB's vectors are kgqr's side index, which re-ranks BM25's top hits "
                    "only: the evidence for a graph default was measured with k-NN over "
                    "every document, and on side vectors graph cost MuSiQue MRR "
                    "(docs/attached-indices.md)"
                )
            return {
                "setting": f"KGQR_REWRITE_DEFAULT_STRATEGY={AUTO_DEFAULT}",
                "strategy": self.strategy.name,
                "embedder": self.auto_for or None,
                "reason": reason,
            }
        return None


@dataclass(frozen=True)
class PassThrough:
    """A search kgqr sends on as the caller sent it, and why: an explain asked for says so
    (a client that asked for one and got none could not tell a pass-through from a bug),
    and the metric `kgqr_searches_passed_through_total` counts each `code`."""

    code: str
    reason: str
    explain: bool = False
    sent_params: dict[str, str] = field(default_factory=dict)  # as SearchPlan's
    answer: AnswerFormat = field(default_factory=AnswerFormat)

    def explanation(self) -> Explain:
        return {"passed_through": self.reason}


FLAG_VALUES = {"": True, "true": True, "1": True, "yes": True, "on": True,
               "false": False, "0": False, "no": False, "off": False}  # fmt: skip


def _flag(value: Any) -> bool:
    """`kgqr.explain` read as the engine reads its own flags: bare (`?kgqr.explain`, as
    `?pretty`) or `true` is on, `false` off (and the 1/yes/on, 0/no/off kgqr always took);
    anything else is the engine's 400, where `maybe` used to mean a silent no."""
    if isinstance(value, bool):
        return value
    flag = FLAG_VALUES.get(str(value).lower()) if isinstance(value, str | int) else None
    if flag is None:
        raise RewriteRequestError(
            400,
            "illegal_argument_exception",
            f"Failed to parse value [{value}] as only [true] or [false] are allowed.",
        )
    return flag


URL_OPTIONS = ("kgqr.strategy", "kgqr.explain")


def _strategy_options(query_params: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    ext = body.get("ext")
    given = (ext.get("kgqr") or {}) if isinstance(ext, dict) else {}
    if not isinstance(given, dict):
        raise RewriteRequestError(400, "parsing_exception", "ext.kgqr must be an object")
    options = dict(given)
    if "kgqr.strategy" in query_params:
        options["strategy"] = query_params["kgqr.strategy"]
    if "kgqr.explain" in query_params:
        options["explain"] = query_params["kgqr.explain"]
    given = options.get("params") or {}
    if not isinstance(given, dict):
        raise RewriteRequestError(400, "parsing_exception", "ext.kgqr.params must be an object")
    params = dict(given)
    for key, value in query_params.items():
        if key.startswith("kgqr.param."):
            params[key.removeprefix("kgqr.param.")] = value
        elif key.startswith("kgqr.") and key not in URL_OPTIONS:
            # A misspelt knob (`kgqr.knn.k` for `kgqr.param.knn.k`) would else do nothing.
            raise RewriteRequestError(
                400,
                "illegal_argument_exception",
                f"unknown kgqr URL parameter [{key}]: use kgqr.strategy, kgqr.explain or "
                "kgqr.param.NAME",
            )
    options["params"] = params
    return options


def explain_asked(query_params: dict[str, str], body: dict[str, Any]) -> bool:
    """Whether the request asks for an explain (`kgqr.explain`, or `ext.kgqr.explain`)."""
    return _flag(_strategy_options(query_params, body).get("explain", False))


def strip_kgqr(body: dict[str, Any]) -> dict[str, Any]:
    """The body without kgqr's ext object, as OpenSearch must receive it."""
    ext = body.get("ext")
    if not isinstance(ext, dict) or "kgqr" not in ext:
        return body
    rest = {k: v for k, v in ext.items() if k != "kgqr"}
    cleaned = {k: v for k, v in body.items() if k != "ext"}
    if rest:
        cleaned["ext"] = rest
    return cleaned


URL_PAGING = ("from", "size")
# A URI search's `q` and the URL options of the query_string query OpenSearch makes of it.
URI_QUERY_OPTIONS = {
    "df": "default_field",
    "analyzer": "analyzer",
    "default_operator": "default_operator",
    "analyze_wildcard": "analyze_wildcard",
    "lenient": "lenient",
}
URI_QUERY_FLAGS = ("analyze_wildcard", "lenient")


def uri_search_as_body(
    query_params: dict[str, str], body: dict[str, Any]
) -> tuple[dict[str, str], dict[str, Any]]:
    """A URI search (`_search?q=...`, what curl users and opensearch-py's `q=` send) as
    the body search OpenSearch makes of it: a query_string query that replaces the body's
    query, with `df`, `analyzer`, ... as its options. It is then rewritten like any other;
    and `q` leaves the URL, where it would replace the hybrid query kgqr sends."""
    if "q" not in query_params:
        return query_params, body
    options: dict[str, Any] = {"query": query_params["q"]}
    for name, option in URI_QUERY_OPTIONS.items():
        if name in query_params:
            value: Any = query_params[name]
            if option in URI_QUERY_FLAGS and (value := opensearch_flag(value)) is None:
                continue  # `?lenient=%20` leaves it unset
            options[option] = value
    rest = {k: v for k, v in query_params.items() if k != "q" and k not in URI_QUERY_OPTIONS}
    return rest, {**body, "query": {"query_string": options}}


def engine_number(value: Any) -> int | None:
    """A body's `from` / `size` as the engine coerces it (5, 2.7, "5", "1.5" read as 5, 2,
    5, 1), or None for what it refuses with its own 400 ("abc", null, true)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    if isinstance(value, int):
        return value
    try:
        number = float(value)
    except ValueError:
        return None
    return int(number) if math.isfinite(number) else None


def _paging(query_params: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    """`from` / `size` as given, the URL's over the body's (as OpenSearch reads them)."""
    given = {name: body[name] for name in URL_PAGING if name in body}
    return given | {name: query_params[name] for name in URL_PAGING if name in query_params}


def with_paging(query_params: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    """The body with `from` / `size` in it as whole numbers. OpenSearch reads the URL's
    over the body's; kgqr builds its own body for a rewritten search (a hybrid query pages
    through `pagination_depth`), so they must be in the body, not left in the URL."""
    paged = dict(body)
    for name, value in _paging(query_params, body).items():
        if name not in query_params:
            paged[name] = engine_number(value)  # readable: else the search passed through
            continue
        number = url_int(name, value)
        if number < 0:
            raise RewriteRequestError(
                400,
                "illegal_argument_exception",
                f"[{name}] parameter cannot be negative, found [{value}]",
            )
        paged[name] = number
    return paged


# Ten digits at most after any zeros: int() of thousands of digits is Python's own error.
JAVA_INT = re.compile(r"[+-]?0*[0-9]{1,10}")


def url_int(name: str, value: str) -> int:
    """A URL's int parameter as the engine reads it (Java's Integer.parseInt), or its 400.
    Python's int() also took " 5" and "5_000", and a number past 32 bits, which the
    engine then refused in the body kgqr built, as its 500."""
    number = int(value) if JAVA_INT.fullmatch(value) else None
    if number is None or not -(2**31) <= number < 2**31:
        raise RewriteRequestError(
            400,
            "illegal_argument_exception",
            f"Failed to parse int parameter [{name}] with value [{value}]",
        )
    return number


def _unreadable_paging(query_params: dict[str, str], body: dict[str, Any]) -> str | None:
    """The body's `from` / `size` the engine refuses ("size": "abc", null), which kgqr
    leaves to the engine's own 400 (the URL's are checked by with_paging)."""
    for name, value in _paging(query_params, body).items():
        if name not in query_params and engine_number(value) is None:
            return f"{name} [{value}]"
    return None


def engine_written(query_params: dict[str, str]) -> PassThrough | None:
    """The pass-through of a search (or msearch) whose answer only the engine writes:
    `format=cbor` or `smile` (answer_format writes JSON and YAML). No explain: it would not
    fit in the binary answer."""
    asked = AnswerFormat.of(query_params).binary
    if asked is None:
        return None
    return _engine_written(asked)


def _engine_written(asked: str) -> PassThrough:
    return PassThrough("format", f"format={asked}: an answer format only the engine writes")


JSON_MEDIA_TYPES = ("application/json", "application/x-ndjson")


def engine_read(content_type: str | None, body: bytes) -> PassThrough | None:
    """The pass-through of a body kgqr does not read as JSON, which the engine answers as
    it would directly: YAML, CBOR or SMILE, which it reads (kgqr answered a YAML search
    with a 400), and any other type (text/plain, a form, none), which it refuses with a
    406. Read as JSON, such a search was rewritten: a cross-site form could spend a
    caller's LLM time on searches the engine refuses them."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media in JSON_MEDIA_TYPES or not body:  # blank JSON is a URL search; blank text, a 406
        return None
    subtype = media.rpartition("/")[2]
    kind = next((kind for kind in ("yaml", "cbor", "smile") if kind in subtype), None)
    if kind is not None:
        return PassThrough("format", f"a {kind.upper()} request body, which only the engine reads")
    return PassThrough(
        "content_type", f"a body of type [{content_type or ''}], which kgqr reads only as JSON"
    )


def _asks_for_no_hits(query_params: dict[str, str], body: dict[str, Any]) -> bool:
    """`size` 0: totals and aggregations only, which are the caller's own query's under
    any rewrite."""
    size = _paging(query_params, body).get("size")
    return size is not None and engine_number(size) == 0


def _sort_keys(query_params: dict[str, str], body: dict[str, Any]) -> list[str]:
    """What a search sorts by: the body's `sort` and the URL's `sort=f:asc,g`, `_score`
    only in its own, descending order (ascending, the rewrite's farthest neighbours came
    first: `_score:asc`)."""
    given = body.get("sort") or []
    keys: list[str] = []
    for item in given if isinstance(given, list) else [given]:
        if isinstance(item, str):
            keys.append(item)
        elif isinstance(item, dict):
            for key, how in item.items():
                order = how.get("order") if isinstance(how, dict) else how
                keys.append(_sort_key(str(key), order))
    for key in query_params.get("sort", "").split(","):
        if key:
            name, _, order = key.partition(":")
            keys.append(_sort_key(name, order))
    return keys


def _sort_key(name: str, order: Any) -> str:
    ascending = name == "_score" and str(order or "desc").lower() != "desc"
    return "_score:asc" if ascending else name


def _asks_named_scores(query_params: dict[str, str], body: dict[str, Any]) -> bool:
    """Whether the search asks for its named clauses' scores, in the URL (where the engine
    reads it: 2.19 accepts the body's and answers names only) or the body. A value the
    engine refuses counts too: passed through, the engine answers it."""
    asked = query_params.get("include_named_queries_score", body.get("include_named_queries_score"))
    return asked is not None and asked is not False and str(asked).lower() != "false"


def _no_threshold(min_score: Any) -> bool:
    """A `min_score` that keeps every hit (LangChain sends 0.0 with every vector search):
    every score, the engine's and a rewrite's normalised ones alike, is at least 0."""
    return isinstance(min_score, int | float) and not isinstance(min_score, bool) and min_score <= 0


def _without_empty_threshold(body: dict[str, Any]) -> dict[str, Any]:
    """The body without a `min_score` that keeps every hit (_no_threshold)."""
    if "min_score" in body and _no_threshold(body["min_score"]):
        return {k: v for k, v in body.items() if k != "min_score"}
    return body


def _pass_through(
    index: str,
    query_params: dict[str, str],
    body: dict[str, Any],
    named: object,
    kb: str | None,
    parsed: ParsedQuery | None,
    default_pipeline: str | None = None,
) -> tuple[str, str] | None:
    """(code, reason) when the search is not one to rewrite, else None. `default_pipeline`:
    the attached index's own default search pipeline, when it has one."""
    if named is None:
        return "no_strategy", (
            "no strategy: the request names none (kgqr.strategy) and "
            "KGQR_REWRITE_DEFAULT_STRATEGY is unset"
        )
    if kb is None:
        return "not_a_knowledge_base", (
            f"[{index}] is not one knowledge base's documents index (kgqr-KB-documents) "
            "nor an index attached as one (kgqr kb attach)"
        )
    if "scroll" in query_params:
        return "scroll", "a scroll search: its later pages come from the engine's scroll context"
    if (unreadable := _unreadable_paging(query_params, body)) is not None:
        return "paging", f"{unreadable} is not a number: the engine answers it"
    if _asks_for_no_hits(query_params, body):
        # A rewrite changes which hits come back, and this search asks for none: rewriting
        # it would cost an LLM call (or queue one, under a budget) for nothing.
        return "no_hits", (
            "size 0 asks for no hits: totals and aggregations are the query's own under any rewrite"
        )
    if any(key != "_score" for key in _sort_keys(query_params, body)):
        # A rewrite changes relevance and adds the k-NN side's neighbours, which match
        # whatever the text: sorted by a field, they would fill the pages beside the
        # query's own matches, with a total that counts only those.
        return "sort", (
            "sorted by a field or by ascending score, not by relevance: a rewrite changes "
            "relevance, and its k-NN neighbours would be sorted in among the query's own matches"
        )
    if "min_score" in body and not _no_threshold(body["min_score"]):
        return "min_score", (
            "min_score: a threshold on the engine's own scores, which a rewritten search "
            "replaces with normalised hybrid ones (the threshold would not hold)"
        )
    if "search_pipeline" in query_params or "search_pipeline" in body:
        return "search_pipeline", (
            "its own search pipeline: a rewritten search runs kgqr's hybrid pipeline, "
            "which would replace it"
        )
    if default_pipeline is not None:
        # Its filters (a tenant's) or response processors would be skipped by the hits
        # and applied to the totals, which the caller's own query counts.
        # Not named: kgqr-meta's, read with the ingest account's right to the settings.
        return "search_pipeline", (
            "the index's default search pipeline: a rewritten search runs kgqr's hybrid "
            "pipeline, which would replace it"
        )
    if "collapse" in body:
        # Measured on 2.19: a hybrid query with `collapse` answers uncollapsed hits, no error.
        return "collapse", (
            "collapse: the engine's hybrid query does not collapse its hits (neural-search "
            "2.19), so the search is sent as it is"
        )
    if body.get("profile") is True:
        # Measured on 2.19: a profiled hybrid query fails ("scorers are null for all
        # sub-queries in hybrid query"); rewritten, every such search cost a failed one.
        return "profile", (
            "profile: the engine cannot profile its hybrid query (neural-search 2.19), so "
            "the search is sent as it is"
        )
    if body.get("rescore"):
        # A rescore runs on each hybrid sub-query before their scores are normalised: its
        # weights lost their meaning (a rescored hit at 1.0, every other near 0).
        return "rescore", (
            "rescore: the engine rescores each of the hybrid query's parts before it "
            "normalises them, which the rescore's weights do not mean, so the search is sent "
            "as it is"
        )
    if "_none_" in (body.get("stored_fields"), query_params.get("stored_fields")):
        # Hits without `_id`: kgqr's fusion and its evidence checks read each hit's id, and
        # such a rewrite failed and fell back after it was computed.
        return "stored_fields", (
            "stored_fields _none_ asks for hits without ids, which a rewritten search ranks "
            "and checks by, so the search is sent as it is"
        )
    if query_params.get("search_type") == "dfs_query_then_fetch":
        # neural-search 2.19 skips its normalisation under DFS on an index of several
        # shards: the hits came back in the hybrid query's raw form, 200, no error.
        return "search_type", (
            "search_type=dfs_query_then_fetch: the engine does not normalise its hybrid "
            "query's scores under it (neural-search 2.19), so the search is sent as it is"
        )
    if parsed is None:
        return "query_shape", (
            "kgqr rewrites match, match_phrase, multi_match, query_string and "
            "simple_query_string queries (alone or in a bool's must/should), URL q= "
            "searches and knn queries on the knowledge base's vector field; this query is "
            "sent as it is"
        )
    if parsed.named and _asks_named_scores(query_params, body):
        # A rewrite keeps the named clauses at no score (the ranking is its own): each
        # would be scored 0 in `matched_queries`, where a direct search gives its score.
        return "named_scores", (
            "include_named_queries_score asks for the named clauses' own scores, which a "
            "rewritten search ranks without, so the search is sent as it is"
        )
    if (size := len(dumps(body.get("query")))) > MAX_REWRITTEN_QUERY_BYTES:
        return "query_size", (
            f"a query of {size} bytes, more than kgqr rewrites ({MAX_REWRITTEN_QUERY_BYTES}): "
            "a rewritten search holds it in each of its parts (the BM25, k-NN and graph "
            "sides, the facets, the highlight), so it is sent as it is"
        )
    if len(parsed.text) > MAX_QUERY_CHARS:
        return "query_length", (
            f"a query text of {len(parsed.text)} characters, longer than kgqr rewrites "
            f"({MAX_QUERY_CHARS}): an embedder reads its first few hundred words, and "
            "an LLM prompt could not hold it, so it is sent as it is"
        )
    if parsed.syntax is not None:
        # Read as words, `film -Nolan` became a search for Nolan and `Nol*` one for the
        # letters "Nol": what the caller asked is in the syntax, and only the engine reads it.
        return "query_syntax", (
            f"{parsed.syntax}: kgqr rewrites plain words, and this "
            "query says more than its words, so it is sent as it is"
        )
    return None


def _vector_query_refused(strategy: Strategy | None) -> tuple[str, str] | None:
    """Why a vector query passes through with this strategy, if it does: an LLM strategy
    would need the words the caller's client turned into the vector."""
    if strategy is not None and strategy.uses_llm:
        return "vector_query", (
            f"a k-NN query carries a vector and no words, and {strategy.name} asks an LLM "
            "about the words: only the LLM-free strategies rewrite it"
        )
    return None


def plan_search(
    index: str,
    query_params: dict[str, str],
    body: dict[str, Any],
    default_strategy: str | None,
    target: SearchTarget | None = None,
) -> SearchPlan | PassThrough:
    """The rewrite to do, or why the search passes through (after strip_kgqr). The query
    string is read here, whole, once: what follows gets the plan. `target`: the knowledge
    base `index` is (KnowledgeBaseIndices.target); by default, the kgqr-KB-documents
    index `index` names, if it is one."""
    options = _strategy_options(query_params, body)
    explain = _flag(options.get("explain", False))
    auto_for, auto_side_vectors = None, False
    if target is None and (own := kb_of_documents_index(index)) is not None:
        target = SearchTarget(own)
    named = options.get("strategy")
    kb_default = target.default if named is None and target is not None else None
    unusable = _unusable_default(kb_default) if kb_default is not None else None
    if unusable is not None:  # recorded by a newer kgqr (a rolling upgrade, a rollback)
        kb_default = None
    if kb_default is not None:  # the KB's own default; the request's parameters still win
        named = kb_default.strategy
        requested = options["params"]
        # ... under their old names too (`alpha` for `rewrite.alpha`).
        renamed = {param.legacy: param.name for param in ALL_PARAMS if param.legacy}
        overridden = {renamed.get(name, name) for name in requested}
        kept = {k: v for k, v in kb_default.params.items() if k not in overridden}
        options["params"] = {**kept, **requested}
    elif named is None:
        named = default_strategy
        if named == AUTO_DEFAULT:
            auto_for = (target.embedder if target is not None else None) or ""
            named = default_strategy_for(auto_for)
            # Side vectors re-rank BM25's top hits only; there `graph` cost MuSiQue 3.1 MRR
            # against base with the same vectors (docs/attached-indices.md): base.
            auto_side_vectors = target is not None and target.side_vectors_only
            if auto_side_vectors:
                named = "base"
    kb = target.kb if target is not None else None
    word_fields = target.word_fields if target is not None else None
    parsed = parse_query(body.get("query"), word_fields or WORD_FIELDS)
    vector_field = target.vector_field if target is not None else None
    if parsed is None and vector_field:
        parsed = parse_vector_query(body.get("query"), vector_field)
    pipeline = target.fields.default_search_pipeline if target and target.fields else None
    passing = _pass_through(index, query_params, body, named, kb, parsed, pipeline)
    sent = engine_params(query_params)
    answer = AnswerFormat.of(query_params)
    if answer.binary is not None:  # only the engine writes its answer: nothing to rewrite
        return replace(_engine_written(answer.binary), sent_params=sent, answer=answer)
    strategy = None
    if named is not None:
        known = known_strategy(named) if isinstance(named, str) else None
        if known is None:
            raise RewriteRequestError(
                400,
                "illegal_argument_exception",
                f"unknown kgqr strategy [{named}]; valid strategies: {', '.join(STRATEGIES)}",
            )
        strategy = STRATEGIES[known]
    declared = strategy.params if strategy is not None else ALL_PARAMS
    given = request_params(declared, options["params"])
    if passing is None and parsed is not None and parsed.vector is not None:
        passing = _vector_query_refused(strategy)
    if passing is not None:
        return PassThrough(*passing, explain=explain, sent_params=sent, answer=answer)
    assert parsed is not None and kb is not None and strategy is not None  # _pass_through
    return SearchPlan(
        index,
        kb,
        strategy,
        parsed,
        with_paging(query_params, _without_empty_threshold(strip_kgqr(body))),
        explain,
        given.values,
        (*given.warnings, *([unusable] if unusable is not None else [])),
        sent,
        given.values.get(HYBRID_BM25.name),
        answer,
        target.fields if target is not None else None,
        kb_default,
        auto_for,
        auto_side_vectors,
    )


def default_problem(kb_default: KbDefault) -> str | None:
    """Why this kgqr cannot run a recorded default, if it cannot: one a newer kgqr
    recorded (a strategy or parameter it added, during a rolling upgrade or after a
    rollback) made every search that named no strategy a 400."""
    if kb_default.strategy is None:
        return None
    if (known := known_strategy(kb_default.strategy)) is None:
        return f"unknown strategy [{kb_default.strategy}]"
    try:
        request_params(STRATEGIES[known].params, kb_default.params)
    except RewriteRequestError as exc:
        return exc.reason
    return None


def _unusable_default(kb_default: KbDefault) -> str | None:
    """Such a default's searches get the proxy's own default instead, and say so."""
    if (problem := default_problem(kb_default)) is None:
        return None
    return (
        f"the knowledge base's default (version {kb_default.version}) is not one this kgqr "
        f"runs ({problem}): the proxy's own default served the search"
    )


def engine_params(query_params: Mapping[str, str]) -> dict[str, str]:
    """The URL parameters of a search the engine reads: kgqr's own and the answer format
    removed (kgqr reads the engine's answers as plain JSON)."""
    return {k: v for k, v in query_params.items()
            if k not in FORMAT_PARAMS and not k.startswith("kgqr.")}  # fmt: skip
