"""What kgqr refuses before building a request: msearch headers that would change the
request's path or method, and kgqr parameters outside their ranges."""

from __future__ import annotations

import pytest

from query_rewriter.engine.errors import RewriteRequestError
from query_rewriter.proxy.msearch_header import check_header
from query_rewriter.search.plan import SearchPlan, plan_search

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
    ("strategy", "name", "value"),
    [
        ("prf", "prf.docs", "10000"),
        ("kar", "kar.k", "inf"),
        ("kar", "knn.k", "nan"),
        ("kgcqr", "kgcqr.k", "-1"),
        ("kar", "kar.k", "2.5"),
        ("base", "rewrite.alpha", "1.5"),
        ("kar", "kar.h", "3"),
        ("hyde", "rewrite.n", "1e9"),
        ("base", "rewrite.alpha", "x"),
        ("prf", "prf_docs", "10000"),  # an old spelling is checked as the new one
    ],
)
def test_parameters_outside_their_range_are_a_400_naming_it(
    strategy: str, name: str, value: str
) -> None:
    with pytest.raises(RewriteRequestError) as refused:
        plan_search(INDEX, {"kgqr.strategy": strategy, f"kgqr.param.{name}": value}, BODY, None)
    assert refused.value.status == 400
    assert " from " in refused.value.reason
    assert (
        f"[{name}]" in refused.value.reason or f"[{name.replace('_', '.')}]" in refused.value.reason
    )


def test_an_integer_no_float_holds_is_a_400_not_an_overflow() -> None:
    body = {**BODY, "ext": {"kgqr": {"params": {"rewrite.alpha": 10**400}}}}
    with pytest.raises(RewriteRequestError) as refused:
        plan_search(INDEX, {}, body, None)
    assert refused.value.status == 400
    assert "[rewrite.alpha]" in refused.value.reason


def test_parameters_in_range_and_of_any_json_number_type_pass() -> None:
    params = {"kar.k": 20, "rewrite.alpha": 0.5}
    body = {**BODY, "ext": {"kgqr": {"strategy": "kar", "params": params}}}
    plan = plan_search(INDEX, {"kgqr.param.kar.h": "1"}, body, None)
    assert isinstance(plan, SearchPlan) and plan.warnings == ()
    assert plan.params == {"kar.k": 20.0, "rewrite.alpha": 0.5, "kar.h": 1.0}


def test_each_knob_has_its_own_name_and_old_names_set_what_they_used_to_with_a_warning() -> None:
    split = plan_search(INDEX, {"kgqr.strategy": "kar", "kgqr.param.kar.k": "5"}, BODY, None)
    # The k-NN k keeps its own.
    assert isinstance(split, SearchPlan) and split.params == {"kar.k": 5.0}
    old = plan_search(INDEX, {"kgqr.strategy": "kar", "kgqr.param.k": "5"}, BODY, None)
    assert isinstance(old, SearchPlan) and old.params == {"knn.k": 5.0, "kar.k": 5.0}
    assert old.warnings == ("[k] is deprecated: use knn.k, kar.k",)
    noop = plan_search(INDEX, {"kgqr.strategy": "kar", "kgqr.param.boost": "2"}, BODY, None)
    assert isinstance(noop, SearchPlan) and noop.params == {} and "ignored" in noop.warnings[0]


def test_a_parameter_the_strategy_does_not_read_is_a_400_listing_the_ones_it_does() -> None:
    with pytest.raises(RewriteRequestError) as refused:
        plan_search(INDEX, {"kgqr.strategy": "hyde", "kgqr.param.kar.k": "5"}, BODY, None)
    assert refused.value.status == 400
    assert "[kar.k]" in refused.value.reason and "rewrite.n" in refused.value.reason


def test_every_strategy_declares_parameters_with_real_settings_defaults() -> None:
    from kgqr_core.settings import Settings
    from query_rewriter.strategies import STRATEGIES
    from query_rewriter.strategies.params import COMMON, param_value

    settings = Settings()
    for strategy in STRATEGIES.values():
        for param in (*COMMON, *strategy.params):
            default = param_value(param, {}, settings)
            assert param.low <= default <= param.high, (strategy.name, param.name)


@pytest.mark.parametrize("ext", [{"kgqr": ["kar"]}, {"kgqr": {"params": [1]}}])
def test_a_malformed_ext_object_is_a_400(ext: dict[str, object]) -> None:
    with pytest.raises(RewriteRequestError) as refused:
        plan_search(INDEX, {}, {**BODY, "ext": ext}, None)
    assert refused.value.status == 400
