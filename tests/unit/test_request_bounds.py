"""What kgqr refuses before building a request: msearch headers that would change the
request's path or method, and kgqr parameters outside their ranges."""

from __future__ import annotations

import pytest

from query_rewriter.errors import RewriteRequestError
from query_rewriter.msearch_header import check_header
from query_rewriter.search_request import plan_search

pytestmark = pytest.mark.unit
INDEX = "kgqr-movies-documents"
BODY = {"query": {"match": {"text": "who directed heat"}}}


@pytest.mark.parametrize(
    "header",
    [
        {"index": "victim/_delete_by_query#"},
        {"index": "a?refresh=true"},
        {"index": ".."},
        {"index": "a b"},
        {"index": ["ok", "bad/x"]},
        {"index": []},
        {"index": 5},
        {"index": "ok", "method": "DELETE"},
        {"index": "ok", "routing": {"nested": 1}},
    ],
)
def test_a_header_that_could_change_the_request_is_refused(header: dict[str, object]) -> None:
    with pytest.raises(RewriteRequestError) as refused:
        check_header(header, None, line=1)
    assert refused.value.status == 400


def test_lists_booleans_and_the_path_index_are_written_as_opensearch_reads_them() -> None:
    checked = check_header(
        {"index": ["a", "b-*"], "request_cache": True, "expand_wildcards": ["open", "hidden"]},
        None,
        line=1,
    )
    assert checked.path == "/a,b-*/_search"
    assert checked.params == {"request_cache": "true", "expand_wildcards": "open,hidden"}
    assert checked.single_index is None
    assert check_header({}, "x,y", line=1).indices == ["x", "y"]
    assert check_header({}, None, line=1).path == "/_search"
    assert check_header({"index": INDEX}, None, line=1).single_index == INDEX


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("prf_docs", "10000"),
        ("k", "inf"),
        ("k", "nan"),
        ("k", "-1"),
        ("k", "2.5"),
        ("alpha", "1.5"),
        ("h", "3"),
        ("n", "1e9"),
        ("alpha", "x"),
    ],
)
def test_parameters_outside_their_range_are_a_400_naming_it(name: str, value: str) -> None:
    with pytest.raises(RewriteRequestError) as refused:
        plan_search(INDEX, {"kgqr.strategy": "prf", f"kgqr.param.{name}": value}, BODY, None)
    assert refused.value.status == 400
    assert f"[{name}]" in refused.value.reason and " from " in refused.value.reason


def test_parameters_in_range_and_of_any_json_number_type_pass() -> None:
    body = {**BODY, "ext": {"kgqr": {"strategy": "kar", "params": {"k": 20, "alpha": 0.5}}}}
    plan = plan_search(INDEX, {"kgqr.param.h": "1"}, body, None)
    assert plan is not None and plan.params == {"k": 20.0, "alpha": 0.5, "h": 1.0}


@pytest.mark.parametrize("ext", [{"kgqr": ["kar"]}, {"kgqr": {"params": [1]}}])
def test_a_malformed_ext_object_is_a_400(ext: dict[str, object]) -> None:
    with pytest.raises(RewriteRequestError) as refused:
        plan_search(INDEX, {}, {**BODY, "ext": ext}, None)
    assert refused.value.status == 400
