"""What a caller sends never reaches code worse than linear in its size.

The proxy plans every search on its event loop, so one request that costs quadratic time
stalls every other caller's search (a 16 KB query_string word once held the loop 3.9 s).
Costs are compared as ratios measured in the same run, never as absolute times: per byte
(or per level), a large input may cost at most 2x what one 16 times smaller costs, where
quadratic code costs 16x. The properties (Hypothesis) check that any input is planned,
filtered or scrubbed without an error other than kgqr's own 400s.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgqr_core.llm import parse_json_object
from query_rewriter.engine import filter_path, query_text
from query_rewriter.engine.errors import RewriteRequestError, redact_addresses
from query_rewriter.engine.filter_path import filtered
from query_rewriter.engine.query_syntax import MAX_QUERY_CHARS, syntax_used
from query_rewriter.engine.query_text import (
    MAX_TEXT_CLAUSES,
    MAX_VECTOR_DIMENSION,
    parse_vector_query,
)
from query_rewriter.proxy.msearch import _items
from query_rewriter.proxy.request_body import decode_body, json_object
from query_rewriter.search.plan import (
    MAX_REWRITTEN_QUERY_BYTES,
    PassThrough,
    SearchPlan,
    plan_search,
    uri_search_as_body,
)

pytestmark = pytest.mark.unit
INDEX = "kgqr-movies-documents"
SMALL, LARGE = 64 * 1024, 1024 * 1024  # the sizes: 1 MB against 64 KB
LINEAR = 2.0  # per-unit cost ratio allowed: quadratic code gives 16 between these sizes


def plan(raw: bytes) -> SearchPlan | PassThrough:
    """A search body planned as the proxy plans it (app.handle_search, less the I/O)."""
    payload = json_object(raw, "request body")
    query_params, body = uri_search_as_body({}, payload)
    return plan_search(INDEX, query_params, body, "graph")


def query_string(text: str) -> bytes:
    return json.dumps({"query": {"query_string": {"query": text}}}).encode()


def seconds(work: Callable[[], Any], repeats: int = 5) -> float:
    """The fastest of a few runs: the least disturbed by the machine's other work."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def per_unit_ratio(work: Callable[[int], Any], small: int, large: int) -> float:
    """Cost per unit of size at `large` over that at `small` (1.0 for linear code); the
    least of up to three measurements. Another process busy on both cores once made one
    measurement 2.14: it inflates one, where code worse than linear costs 16x in each."""
    work(small)  # warm caches (compiled patterns, imports) before timing either
    ratio = float("inf")
    for _ in range(3):
        small_s, large_s = seconds(lambda: work(small)), seconds(lambda: work(large))
        ratio = min(ratio, (large_s / large) / (small_s / small))
        if ratio <= LINEAR:
            break
    return ratio


@pytest.mark.parametrize("word", ["a", "a:", "a?", "a~", "a\\"])
def test_planning_a_single_huge_word_costs_linear_time(word: str) -> None:
    def planned(size: int) -> None:
        plan(query_string(word * (size // len(word))))

    assert per_unit_ratio(planned, SMALL, LARGE) <= LINEAR


def test_a_query_text_longer_than_kgqr_rewrites_passes_through_unscanned() -> None:
    longest = plan(query_string("a" * MAX_QUERY_CHARS))
    assert isinstance(longest, SearchPlan)
    longer = plan(query_string("a:" + "a" * MAX_QUERY_CHARS))
    assert isinstance(longer, PassThrough) and longer.code in ("query_length", "query_syntax")
    # Padded with spaces (which the words kgqr reads leave out), it is still not read as
    # plain words: its syntax would have been missed.
    padded = plan(query_string("title:secret* OR body:x" + " " * MAX_QUERY_CHARS))
    assert isinstance(padded, PassThrough) and padded.code == "query_syntax"
    assert isinstance(plan(query_string("plain words" + " " * 10)), SearchPlan)


@pytest.mark.parametrize("kind", ["query_string", "simple_query_string"])
@pytest.mark.parametrize(
    "word",
    [
        "a",  # a plain word: every syntax pattern is tried on it and fails
        "a:",  # a field-name pattern that backtracks through the word
        "a?",
        "a~",
        "a\\",
        "ab ",  # many short words
    ],
)
def test_syntax_detection_costs_linear_time_up_to_the_longest_text_rewritten(
    kind: str, word: str
) -> None:
    # Scanned from every letter, a 4 KB word took a quarter second (an msearch holds 100).
    def detected(size: int) -> None:
        text = word * (size // len(word))
        for _ in range(20):
            syntax_used(kind, {"query": text})

    assert per_unit_ratio(detected, MAX_QUERY_CHARS // 16, MAX_QUERY_CHARS) <= LINEAR


def test_an_msearch_of_hostile_items_costs_linear_time_in_its_size() -> None:
    def items(size: int) -> None:
        count = 100
        body = query_string("x" * (size // count)).decode()
        raw = ("\n".join(f'{{"index": "{INDEX}"}}\n{body}' for _ in range(count)) + "\n").encode()
        lines, checked = _items(raw, None, count)
        for header, search in zip(checked, lines[1::2], strict=True):
            plan_search(str(header.single_index), {}, search, "graph")

    assert per_unit_ratio(items, SMALL, LARGE) <= LINEAR


def test_inflating_a_body_of_many_gzip_members_costs_linear_time_in_their_number() -> None:
    """Each member was added to what came before, which copied all of it again: 1,024
    members of 10 KB (a 47 KB body) held the event loop 3.4 s."""
    member = gzip.compress(b" " * 4096)

    def inflated(members: int) -> None:
        decode_body(member * members, "gzip", limit=64 * 1024 * 1024)

    assert per_unit_ratio(inflated, 64, 1024) <= LINEAR


def test_a_bool_of_more_clauses_than_the_engine_takes_is_not_read() -> None:
    """Empty clauses count toward no length limit: 10 MB of them were read one by one
    (1.2 s on the event loop) for a search the engine refuses for too many clauses."""
    words = {"match": {"text": "bank robbers"}}
    empty = {"match": {"text": ""}}
    taken = {"query": {"bool": {"should": [words] + [empty] * (MAX_TEXT_CLAUSES - 1)}}}
    assert isinstance(plan(json.dumps(taken).encode()), SearchPlan)
    more = {"query": {"bool": {"should": [words] + [empty] * MAX_TEXT_CLAUSES}}}
    passed = plan(json.dumps(more).encode())
    assert isinstance(passed, PassThrough) and passed.code == "query_shape"


def test_a_vector_longer_than_the_engine_takes_is_not_read() -> None:
    """2M floats were checked, hashed and copied into a rewrite (0.8 s on the event loop)
    for a search the engine refuses for its dimension."""
    longest = {"knn": {"vector": {"vector": [0.5] * MAX_VECTOR_DIMENSION, "k": 3}}}
    assert parse_vector_query(longest, "vector") is not None
    longer = {"knn": {"vector": {"vector": [0.5] * (MAX_VECTOR_DIMENSION + 1), "k": 3}}}
    assert parse_vector_query(longer, "vector") is None


def test_a_query_too_large_to_repeat_in_a_rewrite_passes_through() -> None:
    """A rewritten search holds the caller's query in each of its parts: a 10 MB filter
    would have gone to the engine as some 100 MB, held per search in flight."""

    def searched(ids: int) -> dict[str, Any]:
        values = [f"doc-{n:08d}" for n in range(ids)]
        return {"query": {"bool": {"must": {"match": {"text": "bank robbers"}},
                                   "filter": {"terms": {"_id": values}}}}}  # fmt: skip

    assert isinstance(plan(json.dumps(searched(1000)).encode()), SearchPlan)
    ids = MAX_REWRITTEN_QUERY_BYTES // len('"doc-00000000",')
    passed = plan(json.dumps(searched(ids + 1)).encode())
    assert isinstance(passed, PassThrough) and passed.code == "query_size"


def test_a_bool_of_many_long_clauses_passes_through_before_any_is_scanned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each clause within the length scanned alone, 2,500 of them (10 MB) held the event
    loop for 1.5 s: linear, but all of it for a search that then passes through."""
    scanned: list[str] = []
    monkeypatch.setattr(query_text, "syntax_used", lambda kind, body: scanned.append(kind))
    clause = {"query_string": {"query": "a:" * (MAX_QUERY_CHARS // 2 - 1)}}
    passed = plan(json.dumps({"query": {"bool": {"should": [clause] * 3}}}).encode())
    assert isinstance(passed, PassThrough) and passed.code == "query_length"
    assert scanned == []
    plan(json.dumps({"query": {"bool": {"should": [clause]}}}).encode())
    assert scanned == ["query_string"]  # within the length, it is read


def _nested(depth: int) -> dict[str, Any]:
    answer: dict[str, Any] = {"x": 1, "y": [1, 2]}
    for level in range(depth):
        answer = {"a": answer if level % 2 else [answer], "b": level}
    return answer


@pytest.mark.parametrize("paths", [["**.x"], ["**.**.x"], ["**", "-**.y"], ["a.**.a.**.x"]])
def test_filter_path_costs_linear_time_in_the_answers_depth(paths: list[str]) -> None:
    # `**` paths once doubled at every level: 2.8 s at depth 16, twice that at 17.
    # (A real answer is far shallower; 256 keeps below Python's recursion limit.)
    answers = {depth: _nested(depth) for depth in (16, 256)}
    assert per_unit_ratio(lambda depth: filtered(answers[depth], paths), 16, 256) <= LINEAR


def test_reading_an_llm_answer_cut_off_among_braces_costs_linear_time() -> None:
    """An answer cut off inside a string of braces (a query may ask the LLM for them, and
    JSON mode allows them in strings) was read again from each brace: 0.5 s for 3,000."""

    def work(size: int) -> None:
        assert parse_json_object('{"documents": ["' + "{" * size) is None

    assert per_unit_ratio(work, 1000, 8000) <= LINEAR


def test_filter_path_costs_linear_time_in_distinct_keys_and_paths_together() -> None:
    """Each new key went through every path: the 519 `**.zN` paths a 4 KB URL holds, over
    an answer of 4,000 aggregations (one a distinct key), took 0.9 s; one path, 9 ms."""

    def work(size: int) -> None:
        answer = {"aggregations": {f"agg{n}": {"value": n} for n in range(size)}}
        filtered(answer, [f"**.z{n}" for n in range(size // 8)])

    assert per_unit_ratio(work, 500, 4000) <= LINEAR


def test_filter_path_steps_each_key_through_the_paths_once_not_once_a_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every key of every hit went through every path again: 600 paths (a 7 KB URL) over
    ten hits took 0.25 s, more with every hit or msearch item. Counted, not timed: the
    paths are stepped through once per distinct key and place in the filter, however many
    hits repeat them."""
    steps: list[str] = []
    stepped = filter_path._below

    def counted(paths: Any, key: str) -> Any:
        steps.append(key)
        return stepped(paths, key)

    monkeypatch.setattr(filter_path, "_below", counted)
    hit = {"_id": "d", "_score": 1.0, "_source": {"text": "x" * 100, "vector": [0.1] * 768}}
    paths = [f"*.*.*.*.{n}" for n in range(600)]
    for hits in (10, 100):
        steps.clear()
        answer = {"took": 1, "hits": {"total": {"value": hits}, "hits": [hit] * hits}}
        filtered(answer, paths)
        # took, hits; total, hits; value, _id, _score, _source; text, vector: the same
        # ten steps for a hundred hits as for ten
        assert len(steps) == 10, steps


@pytest.mark.parametrize("run", ["a", "1", "a.", "a:1", "a-", "[a"])
def test_scrubbing_an_upstream_error_costs_linear_time(run: str) -> None:
    def scrubbed(size: int) -> None:
        redact_addresses(run * (size // len(run)))

    assert per_unit_ratio(scrubbed, SMALL, LARGE) <= LINEAR


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list('ab :?*~^()[]{}/\\<>=!+-"|&')), max_size=60).map(
        lambda text: text.replace("a ", " AND ").replace("b ", " NOT ")
    ),
    kind=st.sampled_from(["query_string", "simple_query_string", "match", "multi_match"]),
)
def test_any_text_query_is_planned_or_passed_through(text: str, kind: str) -> None:
    body = {"query": {kind: {"query": text} if kind != "match" else {"title": text}}}
    planned = plan(json.dumps(body).encode())
    assert isinstance(planned, SearchPlan | PassThrough)
    if isinstance(planned, SearchPlan) and kind == "query_string":
        # Rewritten means read as words: no operator the engine would have obeyed.
        assert syntax_used(kind, {"query": text}) is None


@settings(max_examples=200, deadline=None)
@given(
    raw=st.one_of(
        st.binary(max_size=200),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=10),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.sampled_from(["query", "size", "from", "sort", "kgqr"]), inner)
            ),
            max_leaves=12,
        ).map(lambda value: json.dumps(value).encode()),
    )
)
def test_any_body_is_planned_or_refused_with_a_400(raw: bytes) -> None:
    try:
        plan(raw)
    except RewriteRequestError as exc:
        assert exc.status == 400


@settings(max_examples=200, deadline=None)
@given(
    paths=st.lists(
        st.lists(st.sampled_from(["**", "*", "a", "b*", "x"]), min_size=1, max_size=4).map(
            ".".join
        ),
        min_size=1,
        max_size=4,
    ),
    excluded=st.booleans(),
)
def test_filter_path_keeps_only_what_a_path_names(paths: list[str], excluded: bool) -> None:
    answer = _nested(6)
    result = filtered(answer, ["-" + path for path in paths] if excluded else paths)
    assert isinstance(result, dict)
    assert len(json.dumps(result)) <= len(json.dumps(answer))


@settings(max_examples=300, deadline=None)
@given(
    before=st.text(max_size=40),
    after=st.text(max_size=40),
    address=st.sampled_from(
        ["http://10.1.2.3:9200/x", "127.0.0.1:9200", "[::1]:7687", "bolt://neo4j:7687"]
    ),
)
def test_an_address_in_any_text_is_scrubbed(before: str, after: str, address: str) -> None:
    assert address not in redact_addresses(f"{before} {address} {after}")
