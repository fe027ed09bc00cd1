"""The answers kgqr writes in the shape the caller asked: OpenSearch's filter_path rules
(the cases checked against the engine in tests/integration/test_client_requests.py),
pretty JSON and YAML, and an explain no filter drops."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import yaml

from query_rewriter.engine.answer_format import AnswerFormat, json_params
from query_rewriter.engine.filter_path import filtered

HIT = {"_index": "i", "_id": "m1", "_score": 1.0,
       "_source": {"title": "Heat", "metadata": {"title": "Heat"}, "vector": [0.1]}}  # fmt: skip
ANSWER: dict[str, Any] = {
    "took": 3,
    "_shards": {"total": 1},
    "hits": {"total": {"value": 8, "relation": "eq"}, "max_score": 1.0, "hits": [HIT]},
}


def test_includes_wildcards_and_double_wildcards_keep_what_they_name() -> None:
    assert filtered(ANSWER, ["hits.hits._id", "took"]) == {
        "took": 3,
        "hits": {"hits": [{"_id": "m1"}]},
    }
    assert filtered(ANSWER, ["h*.*.*id"]) == {"hits": {"hits": [{"_id": "m1"}]}}
    assert filtered(ANSWER, ["**.title"]) == {
        "hits": {"hits": [{"_source": {"title": "Heat", "metadata": {"title": "Heat"}}}]}
    }
    assert filtered(ANSWER, ["hits.total"]) == {"hits": {"total": ANSWER["hits"]["total"]}}
    assert filtered(ANSWER, ["nothing"]) == {}


def test_excludes_apply_after_includes_and_alone() -> None:
    assert filtered(ANSWER, ["-hits.hits._source", "-_shards", "**.value"]) == {
        "hits": {"total": {"value": 8}}
    }
    alone = filtered(ANSWER, ["-hits.hits._source.vector", "-_shards"])
    assert alone["hits"]["hits"][0]["_source"] == {"title": "Heat", "metadata": {"title": "Heat"}}
    assert "_shards" not in alone and alone["took"] == 3


def test_an_array_element_with_nothing_matched_is_dropped_as_the_engine_drops_it() -> None:
    msearch = {"took": 2, "responses": [{"hits": {"hits": []}}, ANSWER]}
    assert filtered(msearch, ["responses.hits.hits._id", "took"]) == {
        "took": 2,
        "responses": [{"hits": {"hits": [{"_id": "m1"}]}}],
    }


def test_the_answer_is_written_filtered_pretty_or_in_yaml_with_the_explain_kept() -> None:
    params = {"filter_path": "hits.hits._id", "pretty": "", "kgqr.strategy": "graph"}
    shape = AnswerFormat.of(params)
    assert shape == AnswerFormat(pretty=True, filter_path=("hits.hits._id",))
    assert json_params(params) == {"kgqr.strategy": "graph"}
    explained = {**ANSWER, "kgqr": {"strategy": "graph"}}
    written = bytes(asyncio.run(shape.response(explained, 200, explain_at="kgqr")).body).decode()
    assert written.startswith('{\n  "hits"') and json.loads(written) == {
        "hits": {"hits": [{"_id": "m1"}]},
        "kgqr": {"strategy": "graph"},
    }
    as_yaml = asyncio.run(AnswerFormat.of({"format": "yaml"}).response(ANSWER, 200))
    assert as_yaml.media_type == "application/yaml"
    text = bytes(as_yaml.body).decode()
    assert text.startswith("---\n") and yaml.safe_load(text) == ANSWER
    assert AnswerFormat.of({"pretty": "false"}).is_plain_json
    assert AnswerFormat.of({"format": "CBOR"}).binary == "cbor"
    assert AnswerFormat.of({"format": "yaml"}).binary is None
