"""An attached index's field map: suggested from its mapping, refused where the mapping
contradicts it, and read by the search kgqr builds (fields, vectors, `_id` boosts)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ingest.attached_indices import FieldChoices, field_map_for
from plugin.field_map import (
    FieldMap,
    check_field_map,
    index_mapping,
    mapped_fields,
    parse_boosted,
    suggest_field_map,
)
from query_rewriter.engine.hybrid_query import (
    MATCHED_AT_FLOOR,
    OWN_FIELDS,
    HybridWeights,
    SearchFields,
    bm25_clause,
    hybrid_body,
)
from query_rewriter.engine.query_text import parse_query, parse_vector_query
from query_rewriter.search.kb_indices import SearchTarget
from query_rewriter.search.plan import PassThrough, SearchPlan, plan_search

# What LangChain's OpenSearchVectorSearch makes, with a keyword field of the team's own.
LANGCHAIN = {
    "properties": {
        "text": {"type": "text", "fields": {"keyword": {"type": "keyword"}}},
        "vector_field": {"type": "knn_vector", "dimension": 384,
                         "method": {"name": "hnsw", "engine": "lucene",
                                    "space_type": "cosinesimil"}},
        "metadata": {"properties": {"title": {"type": "text"}, "brand": {"type": "keyword"}}},
    }
}  # fmt: skip
HAYSTACK = {
    "properties": {
        "content": {"type": "text"},
        "embedding": {"type": "knn_vector", "dimension": 384},
        "category": {"type": "keyword"},
    }
}


def test_the_mapping_is_read_to_dotted_paths_with_sub_fields() -> None:
    fields = mapped_fields(LANGCHAIN)
    assert fields["metadata.brand"].type == "keyword"
    assert fields["text.keyword"].type == "keyword"
    assert fields["vector_field"].dimension == 384
    assert fields["vector_field"].space_type == "cosinesimil"


@pytest.mark.parametrize(
    ("mapping", "text", "title", "vector"),
    [
        (LANGCHAIN, {"metadata.title": 2.0, "text": 1.0}, "metadata.title", "vector_field"),
        (HAYSTACK, {"content": 1.0}, None, "embedding"),
    ],
)
def test_a_field_map_is_suggested_from_the_names_clients_give(
    mapping: dict[str, Any], text: dict[str, float], title: str | None, vector: str
) -> None:
    suggested = suggest_field_map("articles", mapping)
    assert suggested.text_fields == text
    assert suggested.title_field == title
    assert suggested.vector_field == vector and suggested.dimension == 384
    assert suggested.entity_fields == []  # what a keyword means is the team's call


NESTED_COMMENTS: dict[str, Any] = {"properties": {
    "headline": {"type": "text"},
    "comments": {"type": "nested", "properties": {"text": {"type": "text"}}},
    "content": {"type": "text"},
}}  # fmt: skip


def test_a_nested_text_field_is_neither_suggested_nor_accepted() -> None:
    """A multi_match cannot reach a nested object's words: `comments.text` was suggested
    as the body (its last name first among the body names), and `content` never read."""
    suggested = suggest_field_map("articles", NESTED_COMMENTS)
    assert suggested.body_field == "content" and suggested.title_field == "headline"
    assert mapped_fields(NESTED_COMMENTS)["comments.text"].nested
    chosen = FieldMap(index="articles", text_fields={"comments.text": 1.0})
    (problem,) = check_field_map(chosen, NESTED_COMMENTS)
    assert "nested" in problem


def test_fields_kgqr_reads_from_source_must_be_kept_there() -> None:
    """An entity field left out of `_source` (or a `_source` disabled) gave no edge and
    nothing set aside; a byte vector field, a fallback on every search."""
    properties = {"brand": {"type": "text", "fields": {"keyword": {"type": "keyword"}}},
                  "meta": {"properties": {"tag": {"type": "keyword"}}},
                  "body": {"type": "text"},
                  "vec": {"type": "knn_vector", "dimension": 3, "data_type": "byte"}}  # fmt: skip
    chosen = FieldMap(index="shop", text_fields={"body": 1.0}, body_field="body",
                      entity_fields=["brand.keyword", "meta.tag"])  # fmt: skip
    assert check_field_map(chosen, {"properties": properties}) == []
    for kept, left_out in [
        ({"excludes": ["brand"]}, ["brand.keyword"]),
        ({"excludes": ["meta"]}, ["meta.tag"]),
        ({"includes": ["brand*", "body"]}, ["meta.tag"]),
        ({"excludes": ["body"]}, []),  # explains and prompts lack the body; nothing breaks
    ]:
        problems = check_field_map(chosen, {"properties": properties, "_source": kept})
        assert [p.split("]")[0].split("[")[1] for p in problems] == left_out, kept
    (disabled,) = check_field_map(chosen, {"properties": properties, "_source": {"enabled": False}})
    assert "keeps no _source" in disabled
    unused = chosen.model_copy(update={"entity_fields": []})
    assert check_field_map(unused, {"properties": properties, "_source": {"enabled": False}}) == []
    vectors = unused.model_copy(update={"vector_field": "vec", "vector_model": "m"})
    (byte,) = check_field_map(vectors, {"properties": properties})
    assert "holds byte vectors" in byte


def test_a_field_map_the_mapping_contradicts_is_refused_with_every_reason() -> None:
    wrong = FieldMap(
        index="articles",
        text_fields={"body": 1.0, "metadata.brand": 1.0},
        vector_field="text",
        entity_fields=["metadata.title"],
    )
    problems = check_field_map(wrong, LANGCHAIN, model_dimension=768)
    assert problems == [
        "text field [body] is not in the index's mapping (its text/match_only_text fields: "
        "metadata.title, text)",
        "text field [metadata.brand] is mapped as keyword, not text or match_only_text",
        "entity field [metadata.title] is mapped as text, not keyword or constant_keyword "
        "or wildcard",
        "vector field [text] is mapped as text, not knn_vector",
        "vector field [text] needs the model that made its vectors (--model): kgqr embeds "
        "queries with it",
    ]


def test_vectors_of_another_size_than_the_models_are_refused() -> None:
    fits = suggest_field_map("articles", HAYSTACK).model_copy(update={"vector_model": "m"})
    assert check_field_map(fits, HAYSTACK, model_dimension=384) == []
    assert check_field_map(fits, HAYSTACK, model_dimension=768) == [
        "vector field [embedding] holds 384-dimensional vectors, and m makes 768-dimensional ones"
    ]


def test_indices_behind_an_alias_are_read_as_one_mapping() -> None:
    answer = {"a-v1": {"mappings": HAYSTACK}, "a-v2": {"mappings": LANGCHAIN}}
    merged = mapped_fields(index_mapping(answer))
    assert {"content", "text", "embedding", "vector_field"} <= set(merged)


def test_boosts_are_read_and_bad_ones_refused() -> None:
    assert parse_boosted("title^2") == ("title", 2.0)
    assert parse_boosted("text") == ("text", 1.0)
    for bad in ("title^x", "^2", "title^0", "title^inf", "title^nan"):
        with pytest.raises(ValueError, match=r"title|boost"):
            parse_boosted(bad)


ATTACHED = suggest_field_map("articles", HAYSTACK).model_copy(
    update={"vector_model": "m", "follow_query_fields": True}
)


def test_matches_in_fields_the_team_left_out_of_the_map_stay_in_the_bm25_side() -> None:
    """With `--text title` chosen, a search in `content`: BM25 reads the titles, and the
    caller's matches (its query, as a filter) all stay, at 0 where the titles miss."""
    chosen = ATTACHED.model_copy(update={"follow_query_fields": False,
                                         "text_fields": {"title": 1.0}})  # fmt: skip
    parsed = parse_query({"match": {"content": "heat"}}, ("content", "*"))
    assert parsed is not None
    fields = SearchFields.of(chosen, parsed.fields)
    assert fields.chosen and fields.text == ("title",)
    clause = bm25_clause("heat", parsed, fields)["bool"]
    assert clause["should"][0]["multi_match"]["fields"] == ["title"]
    assert clause["filter"] == [{"match": {"content": "heat"}}] and "must" not in clause
    named = parse_query({"match": {"title": "heat"}}, ("content", "*"))
    assert named is not None and "must" in bm25_clause("heat", named, fields)["bool"]
    own = SearchFields.of(FieldMap.own("kb"), parsed.fields)
    assert not own.chosen and "must" in bm25_clause("heat", parsed, own)["bool"]


def test_an_attached_index_is_searched_in_its_own_fields_and_boosted_by_id() -> None:
    parsed = parse_query({"match": {"content": "heat"}}, ("content", "*"))
    assert parsed is not None and parsed.demands is None  # its word field, not a filter
    fields = SearchFields.of(ATTACHED, parsed.fields)
    assert fields == SearchFields(("content",), "embedding", complete=False)
    weights = HybridWeights(None, (0.25, 0.55, 0.2))
    body = hybrid_body({}, parsed, "heat", np.ones(3), 5, weights, {"d1": 0.5}, fields=fields)
    lexical, knn, boost = body["query"]["hybrid"]["queries"]
    assert lexical["bool"]["must"][0]["multi_match"]["fields"] == ["content"]
    assert set(knn["knn"]) == {"embedding"}
    (boosted,) = boost["bool"]["must"][0]["bool"]["should"]
    assert boosted["constant_score"]["filter"] == {"ids": {"values": ["d1"]}}


@pytest.mark.parametrize(
    "query",
    [
        {"query_string": {"query": "heat"}},
        # A clause naming a field beside one naming none: the latter still reads every field.
        {"bool": {"should": [{"match": {"content": "heat"}}, {"multi_match": {"query": "heat"}}]}},
    ],
)
def test_a_clause_naming_no_field_keeps_its_matches_in_other_fields(query: dict[str, Any]) -> None:
    parsed = parse_query(query, ("content", "*"))
    assert parsed is not None and "*" in parsed.fields
    clause = bm25_clause("heat", parsed, SearchFields.of(ATTACHED, parsed.fields))["bool"]
    assert MATCHED_AT_FLOOR in clause["should"] and clause["filter"] == [query]
    own = bm25_clause("heat", parsed, OWN_FIELDS)["bool"]  # kgqr's own words are all words
    assert "must" in own


def test_a_caller_query_naming_no_field_searches_the_maps_text_fields() -> None:
    parsed = parse_query({"query_string": {"query": "heat"}}, ("content", "*"))
    assert parsed is not None and SearchFields.of(ATTACHED, parsed.fields).text == ("content",)


def test_a_search_on_an_attached_index_is_planned_with_its_field_map() -> None:
    target = SearchTarget("articles", ATTACHED)
    body = {"query": {"match": {"content": "heat"}}}
    plan = plan_search("articles", {"kgqr.strategy": "graph"}, body, None, target)
    assert isinstance(plan, SearchPlan) and plan.kb == "articles" and plan.fields == ATTACHED
    unattached = plan_search("articles", {"kgqr.strategy": "graph"}, body, None)
    assert isinstance(unattached, PassThrough) and unattached.code == "not_a_knowledge_base"


def test_an_index_with_a_default_search_pipeline_is_searched_as_sent() -> None:
    """kgqr's hybrid pipeline would replace the team's default one (its filter, its
    response processors) for the hits only."""
    piped = SearchTarget("articles", ATTACHED.model_copy(
        update={"default_search_pipeline": "tenant-filter"}))  # fmt: skip
    body = {"query": {"match": {"content": "heat"}}}
    plan = plan_search("articles", {"kgqr.strategy": "graph"}, body, None, piped)
    assert isinstance(plan, PassThrough) and plan.code == "search_pipeline"
    assert "default search pipeline" in plan.reason and "tenant" not in plan.reason


def test_a_query_on_any_text_field_of_a_followed_index_asks_for_words() -> None:
    """`match` on `summary`, a text field outside the suggestion, was read as a structured
    value (`type: movie`): the graph added nothing beyond its matches. Attached to follow
    the caller's fields, every text field of the index holds words; a keyword does not."""
    mapping = {"properties": {**HAYSTACK["properties"], "summary": {"type": "text"},
                              "kind": {"type": "keyword"}}}  # fmt: skip
    followed = field_map_for("articles", mapping, FieldChoices(no_vectors=True))
    assert "summary" in followed.word_fields
    target = SearchTarget("articles", followed)
    words = plan_search("articles", {"kgqr.strategy": "graph"},
                        {"query": {"match": {"summary": "heat"}}}, None, target)  # fmt: skip
    assert isinstance(words, SearchPlan) and words.parsed.demands is None
    value = plan_search("articles", {"kgqr.strategy": "graph"},
                        {"query": {"match": {"kind": "movie"}}}, None, target)  # fmt: skip
    assert isinstance(value, SearchPlan) and value.parsed.demands == "its own field [match on kind]"
    fixed = field_map_for("articles", mapping, FieldChoices(text_fields={"content": 1.0}))
    assert fixed.word_fields == []  # the team chose its words


@pytest.mark.parametrize(
    ("query", "read"),
    [
        ({"knn": {"embedding": {"vector": [0.1, 0.2], "k": 4}}}, True),
        ({"knn": {"embedding": {"vector": [1, 0], "k": 4, "filter": {"term": {"a": 1}}}}}, True),
        ({"knn": {"other": {"vector": [0.1], "k": 4}}}, False),  # not the KB's vectors
        ({"knn": {"embedding": {"vector": [0.1], "k": 4, "max_distance": 2}}}, False),
        ({"knn": {"embedding": {"vector": [], "k": 4}}}, False),
        ({"knn": {"embedding": {"vector": [True], "k": 4}}}, False),
        ({"knn": {"embedding": {"vector": [10**400], "k": 4}}}, False),  # no float holds it
        ({"knn": {"embedding": {"vector": [float("nan")], "k": 4}}}, False),
        ({"knn": {"embedding": {"vector": [0.1], "k": 0}}}, False),
        ({"match": {"content": "x"}}, False),
        # Haystack's: the knn as a bool's one must clause, its filters beside it.
        (
            {
                "bool": {
                    "must": [{"knn": {"embedding": {"vector": [0.1], "k": 4}}}],
                    "filter": [{"term": {"a": 1}}],
                }
            },
            True,
        ),
        (
            {
                "bool": {
                    "must": [{"knn": {"embedding": {"vector": [0.1], "k": 4}}}],
                    "should": [{"term": {"a": 1}}],
                }
            },
            False,
        ),
    ],
)
def test_a_retrievers_vector_query_is_read_with_its_filter(query: Any, read: bool) -> None:
    parsed = parse_vector_query(query, "embedding")
    assert (parsed is not None) == read
    if parsed is not None:
        assert parsed.vector is not None and parsed.query == query
        knn = query["bool"]["must"][0] if "bool" in query else query
        own = [knn["knn"]["embedding"]["filter"]] if "filter" in knn["knn"]["embedding"] else []
        assert parsed.filters == [*query.get("bool", {}).get("filter", []), *own]
        # Named by its vector, for the cache: another vector is another rewrite.
        other = parse_vector_query({"knn": {"embedding": {"vector": [0.3], "k": 4}}}, "embedding")
        assert other is not None and other.text != parsed.text


def test_a_vector_query_searches_its_own_knn_side_and_the_graph_only() -> None:
    query = {"knn": {"embedding": {"vector": [1.0, 0.0], "k": 4}}}
    parsed = parse_vector_query(query, "embedding")
    assert parsed is not None
    fields = SearchFields(("content",), "embedding")
    weights = HybridWeights(None, (0.25, 0.55, 0.2))
    body = hybrid_body({}, parsed, parsed.text, np.array([1.0, 0.0]), 4, weights, {"d1": 0.5},
                       fields=fields, added={"d1"})  # fmt: skip
    knn, boost = body["query"]["hybrid"]["queries"]
    assert "filter" not in knn["knn"]["embedding"]  # its own matches are this clause's
    either = boost["bool"]["filter"][0]["bool"]["should"]  # the caller's k nearest, or linked
    assert either == [query, {"ids": {"values": ["d1"]}}]
    shares = body["search_pipeline"]["phase_results_processors"][0]["normalization-processor"]
    assert shares["combination"]["parameters"]["weights"] == [0.8, 0.2]
