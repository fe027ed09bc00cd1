"""Requests as common clients send them, through `kgqr serve` and the nginx front: gzipped
bodies, paging in the URL, msearch headers with lists and booleans, facets and totals,
facet-only (size 0), collapsed and URI (`q=`) searches, filter_path, pretty and YAML."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from opensearchpy import OpenSearch, RequestError
from opensearchpy.helpers.faceted_search import FacetedSearch, TermsFacet
from opensearchpy.helpers.search import Search

from kgqr_core.settings import Settings
from kgqr_ops.background_proxy import free_port
from kgqr_ops.services.process import port_is_open
from query_rewriter import metrics
from query_rewriter.engine.filter_path import filtered
from query_rewriter.proxy.request_body import MAX_NESTING, nesting_depth
from tests.integration.search_helpers import metric_sample

# In the edit-test loop (scripts/test-quick.sh): it needs only the always-on services.
pytestmark = pytest.mark.quick

QUERY = {"query": {"match": {"text": "professional bank robbers chased by the police"}}, "size": 3}
AMERICAN = {"match": {"text": "American"}}  # p1-p3 of 8; k-NN alone would match all 8
NDJSON = {"content-type": "application/x-ndjson"}


def _ids(result: dict[str, Any]) -> list[str]:
    return [hit["_id"] for hit in result["hits"]["hits"]]


def _agrees_with_its_total(rewritten: dict[str, Any], direct: dict[str, Any], size: int) -> None:
    """A rewritten answer a client can page by: as many hits as its total allows, each one
    of the query's matches or a document the graph linked to it (counted in the total)."""
    total = rewritten["hits"]["total"]["value"]
    assert len(_ids(rewritten)) == min(size, total), (total, _ids(rewritten))
    linked = {node["id"] for node in rewritten["kgqr"]["details"].get("graph_nodes", [])}
    assert set(_ids(rewritten)) <= set(_ids(direct)) | linked
    assert total == direct["hits"]["total"]["value"] + len(linked - set(_ids(direct)))


def test_gzipped_request_bodies_work_as_they_do_directly(
    entry_url: str, movies_kb: str, opensearch: Any, unique_name: str
) -> None:
    """opensearch-py's `http_compress=True` gzips every body it sends."""
    client = OpenSearch(hosts=[entry_url], http_compress=True, timeout=300)
    direct = OpenSearch(hosts=[opensearch.transport.hosts[0]], http_compress=True)
    explained = client.search(index=movies_kb, body=QUERY, params={"kgqr.explain": "true"})
    assert explained["kgqr"]["fallback"] is None and _ids(explained)[0] == "m1"
    mixed = client.msearch(body=[{"index": movies_kb}, QUERY, {"index": "kgqr-meta"}, {}])
    assert [item["status"] for item in mixed["responses"]] == [200, 200]
    assert _ids(mixed["responses"][0])[0] == "m1"
    client.index(index=unique_name, id="1", body={"title": "gzip works"}, refresh=True)
    try:
        plain = {"query": {"match": {"title": "gzip"}}}
        assert _ids(client.search(index=unique_name, body=plain)) == ["1"]
        assert (
            client.msearch(body=[{"index": unique_name}, plain])["responses"][0]["hits"]["total"]
            == direct.search(index=unique_name, body=plain)["hits"]["total"]
        )
    finally:
        direct.indices.delete(index=unique_name)


@pytest.mark.parametrize("strategy", ["base", "graph"])
def test_pages_of_a_rewritten_search_join_up_into_its_ranking(
    proxy_url: str, movies_kb: str, strategy: str
) -> None:
    """A client paging through a search sees one ranking: each page's hybrid sub-queries
    are read as deep as the others', so min-max normalisation scores them alike."""

    def page(start: int, size: int) -> list[str]:
        response = httpx.post(
            f"{proxy_url}/{movies_kb}/_search",
            params={"kgqr.strategy": strategy},
            json={
                "query": {"match": {"text": "a film about an American crime"}},
                "from": start,
                "size": size,
            },
            timeout=300,
        )
        assert response.status_code == 200 and "x-kgqr-fallback" not in response.headers
        return _ids(response.json())

    whole = page(0, 8)
    assert len(whole) == 8
    assert page(0, 2) + page(2, 2) + page(4, 4) == whole


def test_paging_in_the_url_pages_the_rewritten_search(entry_url: str, movies_kb: str) -> None:
    client = OpenSearch(hosts=[entry_url], timeout=300)
    body = {"query": {"match": {"text": "American film"}}}
    in_body = client.search(index=movies_kb, body={**body, "from": 1, "size": 2})
    response = httpx.post(
        f"{entry_url}/{movies_kb}/_search",
        json=body,
        params={"from": "1", "size": "2", "kgqr.explain": "true"},
        timeout=300,
    )
    assert response.status_code == 200 and "x-kgqr-fallback" not in response.headers
    in_url = response.json()
    assert in_url["kgqr"]["fallback"] is None
    assert in_url["kgqr"]["final_query"]["query"]["hybrid"]["pagination_depth"] >= 3
    assert _ids(in_url) == _ids(in_body) and len(_ids(in_url)) == 2
    first_page = client.search(index=movies_kb, body=body, params={"size": "1"})
    assert _ids(first_page) == _ids(client.search(index=movies_kb, body={**body, "size": 1}))
    assert _ids(first_page)[0] not in _ids(in_url)
    bad = httpx.post(f"{entry_url}/{movies_kb}/_search", json=body, params={"from": "-1"})
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "illegal_argument_exception"


def test_msearch_headers_with_lists_and_booleans_answer_as_directly(
    entry_url: str, movies_kb: str, opensearch: Any
) -> None:
    """opensearch-dsl's MultiSearch puts search options into the item headers: an item on
    one knowledge base is rewritten with them (they used to make it pass through), one
    on two indices is not."""
    body = [
        {"index": [movies_kb, "kgqr-meta"]}, {"query": AMERICAN},
        {"index": movies_kb, "request_cache": True, "routing": "r1"}, {"query": AMERICAN},
        {"index": movies_kb}, {"query": AMERICAN, "size": 5},
    ]  # fmt: skip
    client = OpenSearch(hosts=[entry_url], timeout=300)
    # Twice: the second would read the hybrid answer from the engine's request cache,
    # which neural-search 2.19 fails on (a 500, so a fall back) had kgqr asked it to.
    for _ in range(2):
        via = client.msearch(body=body, params={"kgqr.explain": "true"})["responses"]
    direct = opensearch.msearch(body=body)["responses"]
    assert [item["status"] for item in via] == [item["status"] for item in direct] == [200] * 3
    assert _ids(via[0]) == _ids(direct[0])  # not rewritten: the engine's answer
    assert "more than one index" in via[0]["kgqr"]["passed_through"]
    for rewritten, plain in zip(via[1:], direct[1:], strict=True):
        assert rewritten["kgqr"]["fallback"] is None and "passed_through" not in rewritten["kgqr"]
        assert rewritten["hits"]["total"] == plain["hits"]["total"]
        assert len(_ids(rewritten)) > len(_ids(plain)) or _ids(rewritten) != _ids(plain)


def _type_facets(client: OpenSearch, index: str, text: str) -> Any:
    """opensearch-dsl's FacetedSearch, as a search UI builds one: an index and a client
    are class attributes there."""

    class TypeFacets(FacetedSearch):  # type: ignore[misc]
        fields = ("title", "text")

    TypeFacets.index, TypeFacets.facets = index, {"type": TermsFacet(field="type")}
    TypeFacets.using = client  # type: ignore[assignment]  # declared as a connection alias
    return TypeFacets(text).execute()


def test_totals_and_aggregations_are_the_original_querys(
    entry_url: str, movies_kb: str, opensearch: Any
) -> None:
    """The rewrite changes the order of the hits only: hits.total and aggregations keep
    meaning "documents matching what the caller asked", and the hits are those documents
    (README: Search semantics). kgqr once returned five hits under a total of 3."""
    via = OpenSearch(hosts=[entry_url], timeout=300)
    search = Search(index=movies_kb).query(AMERICAN).extra(size=5)
    search.aggs.bucket("types", "terms", field="type")
    direct_result = search.using(opensearch).execute()
    rewritten = search.using(via).extra(ext={"kgqr": {"explain": True}}).execute()
    assert rewritten.to_dict()["kgqr"]["fallback"] is None
    assert direct_result.hits.total.value == 3
    assert rewritten.hits.total.to_dict() == direct_result.hits.total.to_dict()
    assert rewritten.aggregations.to_dict() == direct_result.aggregations.to_dict()
    assert search.using(via).count() == 3
    assert {hit.meta.id for hit in rewritten.hits} == {hit.meta.id for hit in direct_result.hits}
    facets_direct = _type_facets(opensearch, movies_kb, "American")
    facets_via = _type_facets(via, movies_kb, "American")
    assert facets_via.facets.type == facets_direct.facets.type == [("person", 3, False)]
    assert facets_via.hits.total.value == 3
    no_total = via.search(index=movies_kb, body={"query": AMERICAN, "track_total_hits": False})
    assert "total" not in no_total["hits"]


def test_a_search_for_totals_and_facets_alone_is_answered_without_a_rewrite(
    entry_url: str, movies_kb: str, opensearch: Any
) -> None:
    """Size 0, as a search UI asks for its facets: the answer is the caller's query's
    under any rewrite, so kgqr sends it on as it came; an LLM strategy (hyde here) would
    else spend a rewrite on nothing. An explain asked for says why; so does an msearch's."""
    body = {"size": 0, "query": AMERICAN, "aggs": {"types": {"terms": {"field": "type"}}}}
    before = metric_sample("kgqr_searches_passed_through_total", reason="no_hits")
    via = httpx.post(
        f"{entry_url}/{movies_kb}/_search", params={"kgqr.strategy": "hyde"}, json=body, timeout=60
    )
    assert via.status_code == 200 and "kgqr" not in via.json()
    direct = opensearch.search(index=movies_kb, body=body)
    assert {**via.json(), "took": 0} == {**direct, "took": 0}  # max_score too: null
    assert metric_sample("kgqr_searches_passed_through_total", reason="no_hits") == before + 1
    explained = httpx.post(
        f"{entry_url}/{movies_kb}/_search",
        params={"kgqr.strategy": "hyde", "kgqr.explain": "true", "size": "0"},
        json={**body, "size": 3},  # the URL's size wins, as in OpenSearch
        timeout=60,
    ).json()
    assert explained["kgqr"]["passed_through"].startswith("size 0 asks for no hits")
    assert explained["aggregations"] == direct["aggregations"]
    items = [{"index": [movies_kb, "kgqr-meta"]}, {"query": AMERICAN}, {"index": movies_kb}, body]
    responses = OpenSearch(hosts=[entry_url], timeout=60).msearch(
        body=items, params={"kgqr.strategy": "hyde", "kgqr.explain": "true"}
    )["responses"]
    assert "more than one index" in responses[0]["kgqr"]["passed_through"]
    assert responses[1]["kgqr"]["passed_through"].startswith("size 0")
    assert responses[1]["aggregations"] == direct["aggregations"]


@pytest.mark.parametrize(
    ("options", "params", "reason"),
    [
        ({"collapse": {"field": "type"}}, {}, "collapse"),
        ({"sort": [{"id": "desc"}]}, {}, "sorted"),
        ({"sort": [{"_score": "asc"}]}, {}, "sorted"),  # the farthest neighbours came first
        ({"min_score": 0.5}, {}, "min_score"),
        ({}, {"search_pipeline": "kgqr-hybrid"}, "its own search pipeline"),
    ],
)
def test_searches_whose_options_a_rewrite_would_void_are_answered_as_directly(
    entry_url: str,
    movies_kb: str,
    opensearch: Any,
    options: dict[str, Any],
    params: dict[str, str],
    reason: str,
) -> None:
    """Rewritten, each of these came back as if the option were not there, ten hits for
    the query's four matches (two types): `collapse` (the engine's hybrid query, neural-
    search 2.19, ignores it), a field sort (the k-NN side's neighbours sorted in among the
    matches), `min_score` (held against the hybrid's normalised scores, it dropped
    nothing), the caller's own search pipeline (replaced by kgqr's). kgqr sends them as
    they are, and the explain says why."""
    body = {"query": {"match": {"text": "American film"}}, **options}
    via = httpx.post(
        f"{entry_url}/{movies_kb}/_search",
        params={"kgqr.strategy": "graph", "kgqr.explain": "true", **params},
        json=body,
        timeout=60,
    ).json()
    direct = opensearch.search(index=movies_kb, body=body, params=params)
    assert _ids(via) == _ids(direct) and 2 <= len(_ids(via)) <= 4
    assert via["kgqr"]["passed_through"].startswith(reason)


def test_a_uri_search_is_rewritten_as_the_body_search_opensearch_makes_of_it(
    entry_url: str, movies_kb: str, opensearch: Any
) -> None:
    """`_search?q=...` (curl's habit, opensearch-py's `q=`) is the query_string query
    OpenSearch makes of it: rewritten like one, its `df` and other options shaping the
    totals as they do directly."""
    client = OpenSearch(hosts=[entry_url], timeout=300)
    params = {"kgqr.strategy": "graph", "kgqr.explain": "true"}
    uri = client.search(index=movies_kb, q="Pacino", size=5, params=params)
    in_body = {"query": {"query_string": {"query": "Pacino"}}, "size": 5}
    body = client.search(index=movies_kb, body=in_body, params=params)
    assert uri["kgqr"]["query"] == "Pacino" and uri["kgqr"]["fallback"] is None
    assert _ids(uri) == _ids(body) and _ids(uri)[0] == "p2"  # the one match, then its links
    _agrees_with_its_total(uri, opensearch.search(index=movies_kb, q="Pacino", size=100), 5)
    for options in ({"q": "Pacino", "df": "title"}, {"q": "American", "df": "title"}):
        # `base`: no graph adds documents, so the total is the query's own.
        rewritten = client.search(index=movies_kb, params={**options, "kgqr.strategy": "base"})
        assert (
            rewritten["hits"]["total"]
            == opensearch.search(index=movies_kb, params=options)["hits"]["total"]
        ), options


def test_a_query_string_in_the_query_language_is_answered_as_directly(
    entry_url: str, movies_kb: str, opensearch: Any
) -> None:
    """Read as words, `American actor -Pacino` was rewritten into a search for Pacino (his
    page came first), `Pac*` into the k-NN neighbours of "Pac", a search-as-you-type
    prefix likewise. The syntax is the engine's to read: such searches pass through; a
    plain question is still rewritten."""
    client = OpenSearch(hosts=[entry_url], timeout=300)
    params = {"kgqr.strategy": "graph", "kgqr.explain": "true"}
    prefix = {"multi_match": {"query": "Al Pa", "type": "bool_prefix", "fields": ["text"]}}
    typed = client.search(index=movies_kb, body={"query": prefix}, params=params)
    assert _ids(typed) == ["p2"] and typed["kgqr"]["passed_through"].startswith("a prefix match")
    for text in ("American actor -Pacino", "Pac*", "title:Heat"):
        direct = opensearch.search(index=movies_kb, q=text, size=5)
        uri = client.search(index=movies_kb, q=text, size=5, params=params)
        body = {"query": {"query_string": {"query": text}}, "size": 5}
        in_body = client.search(index=movies_kb, body=body, params=params)
        assert _ids(uri) == _ids(in_body) == _ids(direct), text
        assert uri["kgqr"]["passed_through"].startswith("query_string syntax"), text
        if text.endswith("-Pacino"):
            assert _ids(direct) == ["p3", "p1", "p4"]  # the American actors but Pacino
    asked = client.search(
        index=movies_kb, q="Which American actor starred in Heat?", size=5, params=params
    )
    assert "passed_through" not in asked["kgqr"] and asked["kgqr"]["fallback"] is None
    direct = opensearch.search(index=movies_kb, q="Which American actor starred in Heat?", size=99)
    _agrees_with_its_total(asked, direct, 5)  # rewritten: its matches and the graph's links


def test_a_search_carried_in_the_url_is_rewritten_like_one_in_the_body(
    entry_url: str, movies_kb: str, opensearch: Any
) -> None:
    """GET-only clients send the body as `?source=...&source_content_type=...`. kgqr read
    no query there, passed the search on beside a JSON body of its own when asked to
    explain, and the engine refused the `source` it then found as well (a 400)."""
    body = {"query": {"match": {"text": "American"}}, "size": 5}
    params = {"kgqr.strategy": "graph", "kgqr.explain": "true"}
    in_url = {"source": json.dumps(body), "source_content_type": "application/json"}
    search = f"{entry_url}/{movies_kb}/_search"
    carried = httpx.get(search, params={**in_url, **params}, timeout=60).json()
    sent = httpx.post(search, params=params, json=body, timeout=60).json()
    assert carried["kgqr"]["strategy"] == "graph" and carried["kgqr"]["fallback"] is None
    matched = opensearch.search(index=movies_kb, body={**body, "size": 99})
    assert _ids(carried) == _ids(sent)
    _agrees_with_its_total(carried, matched, 5)
    sorted_in_url = {**in_url, "source": json.dumps({**body, "sort": [{"id": "desc"}]})}
    passed = httpx.get(search, params={**sorted_in_url, **params}, timeout=60).json()
    direct = opensearch.transport.perform_request(
        "GET", f"/{movies_kb}/_search", params=sorted_in_url
    )
    assert _ids(passed) == _ids(direct) == ["p3", "p2", "p1"]
    assert passed["kgqr"]["passed_through"].startswith("sorted")
    lines = [{"index": movies_kb}, body, {"index": "kgqr-meta"}, {"size": 1}]
    ndjson = "".join(json.dumps(line) + "\n" for line in lines)
    multi = {"source": ndjson, "source_content_type": "application/x-ndjson", **params}
    responses = httpx.get(f"{entry_url}/_msearch", params=multi, timeout=60).json()["responses"]
    assert _ids(responses[0]) == _ids(sent) and responses[0]["kgqr"]["strategy"] == "graph"
    assert "passed_through" in responses[1]["kgqr"]


def test_a_yaml_search_is_answered_as_directly(
    entry_url: str, movies_kb: str, settings: Settings
) -> None:
    """OpenSearch reads YAML (and CBOR, SMILE) request bodies; kgqr parsed only JSON and
    answered a YAML search with a 400. Such searches are the engine's to read and answer."""
    body = yaml.safe_dump({"query": {"match": {"text": "Pacino"}}, "size": 2})
    answers = [
        httpx.post(
            f"{url}/{movies_kb}/_search",
            content=body,
            params={"kgqr.strategy": "graph"} if url == entry_url else {},
            headers={"content-type": "application/yaml"},
        )
        for url in (entry_url, settings.opensearch.url.rstrip("/"))
    ]
    via, direct = answers
    assert via.status_code == direct.status_code == 200
    assert via.headers["content-type"] == direct.headers["content-type"] == "application/yaml"
    assert [hit["_id"] for hit in yaml.safe_load(via.text)["hits"]["hits"]] == ["p2"]


def test_a_rewritten_search_highlights_what_the_caller_typed(
    entry_url: str, movies_kb: str, opensearch: Any
) -> None:
    """The engine highlights a search's query, and a rewritten search's BM25 side holds
    the expansions too: with `prf` (the top hits' text appended) nearly every word of a hit
    came back in <em>. The caller's own query is the highlight query."""
    body = {"query": {"match": {"text": "American actor"}}, "highlight": {"fields": {"text": {}}}}
    direct = {hit["_id"]: hit.get("highlight") for hit in opensearch.search(
        index=movies_kb, body=body)["hits"]["hits"]}  # fmt: skip
    via = httpx.post(
        f"{entry_url}/{movies_kb}/_search", params={"kgqr.strategy": "prf"}, json=body, timeout=60
    ).json()["hits"]["hits"]
    assert {"p2", "p3"} <= set(direct)
    assert {hit["_id"]: hit.get("highlight") for hit in via if hit["_id"] in direct} == direct
    typed = "an <em>American</em> <em>actor</em> who starred"
    assert direct["p2"] == {"text": [f"Al Pacino\nAl Pacino is {typed} as a detective in Heat."]}


def test_kgqrs_answers_carry_the_headers_the_engines_would(
    entry_url: str, movies_kb: str, settings: Settings, unique_name: str
) -> None:
    """The engine echoes `X-Opaque-Id` on every answer (clients trace requests by it) and
    sends `Warning` for deprecated usage; kgqr's own answers (rewritten, explained,
    msearch, its own 400s) came back with neither. The engine warns once per usage and
    X-Opaque-Id, so each request here has its own."""
    body = {"query": {"match": {"text": "Pacino"}}, "indices_boost": {movies_kb: 2}}
    search = f"{entry_url}/{movies_kb}/_search"
    for n, params in enumerate(({}, {"kgqr.explain": "true"}, {"filter_path": "took"})):
        trace = {"x-opaque-id": f"{unique_name}-{n}"}
        rewritten = httpx.post(
            search, params={"kgqr.strategy": "graph", **params}, json=body, headers=trace
        )
        assert rewritten.headers["x-opaque-id"] == trace["x-opaque-id"], params
    ndjson = json.dumps({"index": movies_kb}) + "\n" + json.dumps(body) + "\n"
    multi = httpx.post(
        f"{entry_url}/_msearch",
        params={"kgqr.strategy": "graph"},
        content=ndjson,
        headers={"x-opaque-id": "trace-7", "content-type": "application/x-ndjson"},
    )
    assert multi.headers["x-opaque-id"] == "trace-7"
    refused = httpx.post(search, params={"kgqr.strategy": "nosuch"}, json=body, headers=trace)
    assert refused.status_code == 400 and refused.headers["x-opaque-id"] == trace["x-opaque-id"]
    # An explained pass-through is one request to the engine, so its one warning is there.
    facets = {**body, "size": 0}
    warned = [
        httpx.post(url, params=params, json=facets, headers={"x-opaque-id": f"{unique_name}-{to}"})
        for to, url, params in (
            ("direct", f"{settings.opensearch.url.rstrip('/')}/{movies_kb}/_search", {}),
            ("kgqr", search, {"kgqr.explain": "true"}),
        )
    ]
    assert "indices_boost is deprecated" in warned[0].headers["warning"]
    assert warned[1].headers["warning"] == warned[0].headers["warning"]


def test_a_warning_from_any_request_kgqr_made_reaches_the_caller(
    entry_url: str, movies_kb: str, unique_name: str
) -> None:
    """A rewritten search is several requests to the engine; the answer carried only the
    hybrid's `Warning`s. A deprecated aggregation runs only in the totals request, and an
    msearch kept one item's warnings (each item's replaced the last's)."""
    daily = {"d": {"date_histogram": {"field": "day", "interval": "1d"}}}
    interval, boost = "[interval] on [date_histogram] is deprecated", "indices_boost is deprecated"
    body = {"query": {"match": {"text": "Pacino"}}, "size": 2, "aggs": daily}
    search = f"{entry_url}/{movies_kb}/_search"
    for n, params in enumerate(({}, {"kgqr.explain": "true"}, {"kgqr.param.fusion.plain": "1"})):
        trace = {"x-opaque-id": f"{unique_name}-agg-{n}"}
        answer = httpx.post(search, params={"kgqr.strategy": "graph", **params}, json=body,
                            headers=trace)  # fmt: skip
        assert answer.status_code == 200 and interval in answer.headers["warning"], params
    boosted = {"query": {"match": {"text": "Heat"}}, "indices_boost": {movies_kb: 2}}
    ndjson = "".join(json.dumps(line) + "\n" for line in
                     ({"index": movies_kb}, body, {"index": movies_kb}, boosted))  # fmt: skip
    multi = httpx.post(
        f"{entry_url}/_msearch",
        params={"kgqr.strategy": "graph"},
        content=ndjson,
        headers={"x-opaque-id": f"{unique_name}-multi", "content-type": "application/x-ndjson"},
    )
    assert interval in multi.headers["warning"] and boost in multi.headers["warning"]


def test_named_queries_still_say_which_clause_a_hit_matched(
    entry_url: str, movies_kb: str, opensearch: Any
) -> None:
    """A rewritten search dropped the caller's `_name`s: no hit had `matched_queries`.
    They are kept at no score: the names come back as directly, the ranking unchanged."""
    clauses = [("text", "Pacino", "actor"), ("title", "Heat", "film")]
    named = [{"match": {f: {"query": q, "_name": n}}} for f, q, n in clauses]
    unnamed = [{"match": {f: {"query": q}}} for f, q, _ in clauses]
    url, params = f"{entry_url}/{movies_kb}/_search", {"kgqr.strategy": "graph"}
    answers = [
        httpx.post(url, params=params, json={"query": {"bool": {"should": should}}}).json()
        for should in (named, unnamed)
    ]
    hits = [answer["hits"]["hits"] for answer in answers]
    direct = opensearch.search(index=movies_kb, body={"query": {"bool": {"should": named}}})
    expected = {hit["_id"]: hit["matched_queries"] for hit in direct["hits"]["hits"]}
    assert expected == {"p2": ["actor"], "m1": ["film"]}
    assert {
        hit["_id"]: hit.get("matched_queries") for hit in hits[0] if hit["_id"] in expected
    } == expected
    assert [(h["_id"], h["_score"]) for h in hits[0]] == [(h["_id"], h["_score"]) for h in hits[1]]


def test_a_fuzzy_match_keeps_its_typo_tolerance(entry_url: str, movies_kb: str) -> None:
    """The rewritten BM25 side dropped `fuzziness`: "Pacnio" matched nothing there. With
    the text side alone weighed (hybrid.bm25 = 1) the misspelt name must still find him."""
    fuzzy = {"match": {"text": {"query": "Pacnio", "fuzziness": "AUTO"}}}
    params = {"kgqr.strategy": "base", "kgqr.param.hybrid.bm25": "1", "kgqr.explain": "true"}
    answer = httpx.post(
        f"{entry_url}/{movies_kb}/_search", params=params, json={"query": fuzzy, "size": 3}
    ).json()
    assert answer["hits"]["hits"][0]["_id"] == "p2" and answer["hits"]["hits"][0]["_score"] > 0.5
    lexical = answer["kgqr"]["final_query"]["query"]["hybrid"]["queries"][0]["bool"]["must"][0]
    assert lexical["multi_match"]["fuzziness"] == "AUTO"


FILTERS = [
    "hits.hits._id,took",
    "h*.*.*id",
    "**.title",
    "-hits.hits._source,-_shards,-took,**.value",
    "-hits.hits._source.vector,-took",
    "nothing",
    # `**` is one key or more, `*` the only wildcard within a key (kgqr read `**` as none
    # too, and `?` as any character: 25 of 510 random paths differed from the engine)
    "**.took,**.**.**",
    "hits.**.**,hits.hits.**._id",
    "**.hits._id,-**.title",
    "t?ok",
]


@pytest.mark.parametrize("paths", FILTERS)
def test_kgqrs_filter_path_filters_as_the_engine_does(
    movies_kb: str, opensearch: Any, paths: str
) -> None:
    """The engine is the reference: its whole answer filtered by kgqr equals its own
    filtered answer."""
    body = {"size": 3, "_source": ["title", "metadata", "vector"], "sort": ["id"]}
    whole = opensearch.search(index=movies_kb, body=body)
    own = opensearch.search(index=movies_kb, body=body, params={"filter_path": paths})
    took = {"took": own["took"]} if "took" in own else {}
    assert {**filtered(whole, paths.split(",")), **took} == own


def test_a_rewritten_search_answers_in_the_shape_asked_for(entry_url: str, movies_kb: str) -> None:
    """filter_path, pretty and format=yaml on a fused search and an msearch: kgqr reads
    whole JSON answers from the engine and shapes its own (each used to break: a 500 with
    fusion and filter_path or with YAML, empty msearch items, pretty lost)."""
    url, query = f"{entry_url}/{movies_kb}/_search", {"query": {"match": {"text": "Pacino"}}}
    fused = {"kgqr.strategy": "graph", "kgqr.param.fusion.plain": "1", "size": "2"}
    ids = httpx.post(url, params={**fused, "filter_path": "hits.hits._id"}, json=query).json()
    assert ids["hits"]["hits"][0]["_id"] == "p2" and set(ids) == {"hits"}
    took = httpx.post(url, params={**fused, "filter_path": "took", "pretty": ""}, json=query)
    assert took.status_code == 200 and took.text.startswith('{\n  "took": ')
    assert set(took.json()) == {"took"}
    explained = {**fused, "filter_path": "took", "kgqr.explain": "true"}
    assert set(httpx.post(url, params=explained, json=query).json()) == {"took", "kgqr"}
    as_yaml = httpx.post(url, params={**fused, "format": "yaml"}, json=query)
    assert as_yaml.headers["content-type"] == "application/yaml"
    assert yaml.safe_load(as_yaml.text)["hits"]["hits"][0]["_id"] == "p2"
    lines = [{"index": movies_kb}, {**query, "size": 0}, {"index": movies_kb}, {**query, "size": 1}]
    content = "".join(json.dumps(line) + "\n" for line in lines)
    msearch = httpx.post(
        f"{entry_url}/_msearch",
        params={"kgqr.strategy": "graph", "filter_path": "responses.hits.hits._id,took"},
        content=content,
        headers={"content-type": "application/x-ndjson"},
    ).json()
    # The size-0 item, left with nothing, is dropped, as the engine drops it.
    assert msearch["responses"] == [{"hits": {"hits": [{"_id": "p2"}]}}] and "took" in msearch
    too_far = {**query, "from": 9999, "size": 5}  # an error: never filtered, as directly
    error = httpx.post(url, params={**fused, "filter_path": "hits.hits._id"}, json=too_far)
    assert error.status_code == 400 and "Result window is too large" in error.text
    binary = httpx.post(url, params={"kgqr.strategy": "graph", "format": "cbor"}, json=query)
    assert binary.headers["content-type"] == "application/cbor"  # passed through


def test_kgqr_serve_stopped_by_sigterm_removes_its_front_folder(tmp_path: Path) -> None:
    def front_folders() -> set[Path]:
        return set(Path("/tmp").glob("kgqr-front-*"))

    before = front_folders()
    port, front_port = free_port(), free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", "from kgqr_ops.cli import main; main()", "serve",
         "--port", str(port), "--front-port", str(front_port), "--log-level", "warning"],
        env={**os.environ, "HF_HUB_OFFLINE": "1"}, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (port_is_open("127.0.0.1", port) and port_is_open("127.0.0.1", front_port)):
            assert server.poll() is None, server.stderr.read().decode() if server.stderr else ""
            assert time.monotonic() < deadline, "kgqr serve did not listen within 120 s"
            time.sleep(0.2)
        assert front_folders() - before, "the running front has no folder under /tmp"
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
    assert front_folders() - before == set()
    assert not port_is_open("127.0.0.1", front_port)


def test_kgqr_serve_with_workers_logs_every_rewrite_and_counts_all_of_them(
    tmp_path: Path, movies_kb: str
) -> None:
    """`--workers N` spawns its processes afresh: they wrote no kgqr line at INFO (the
    `rewrite` line of each search), and a scrape of the metrics showed whichever
    process answered it."""
    from prometheus_client.parser import text_string_to_metric_families

    def shared_folders() -> set[Path]:
        return set(Path(tempfile.gettempdir()).glob("kgqr-metrics-*"))

    before, port, searches = shared_folders(), free_port(), 8
    url = f"http://127.0.0.1:{port}"
    with (tmp_path / "serve.log").open("wb") as stderr:
        server = subprocess.Popen(
            [sys.executable, "-c", "from kgqr_ops.cli import main; main()", "serve",
             "--port", str(port), "--workers", "2"],
            env={**os.environ, "HF_HUB_OFFLINE": "1"}, stderr=stderr,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not port_is_open("127.0.0.1", port):
            assert server.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, "kgqr serve did not listen within 120 s"
            time.sleep(0.2)
        for n in range(searches):  # a connection each: the kernel deals them to the workers
            body = {"query": {"match": {"text": f"bank robbers {n}"}}}
            answer = httpx.post(f"{url}/{movies_kb}/_search", params={"kgqr.strategy": "base"},
                                json=body, timeout=300)  # fmt: skip
            assert answer.status_code == 200, answer.text

        def searches_counted() -> float:
            text = httpx.get(f"{url}{metrics.PATH}", timeout=60).text
            return sum(
                sample.value
                for family in text_string_to_metric_families(text)
                for sample in family.samples
                if sample.name == "kgqr_requests_total" and sample.labels["kind"] == "search"
            )

        assert [searches_counted() for _ in range(6)] == [searches] * 6
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    lines = [json.loads(line) for line in (tmp_path / "serve.log").read_text().splitlines()
             if line.startswith("{")]  # fmt: skip
    rewrites = [line for line in lines if line["message"] == "rewrite"]
    assert len(rewrites) == searches, lines
    assert {line["kgqr"]["strategy"] for line in rewrites} == {"base"}
    assert shared_folders() == before  # the metrics' folder goes with the server


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compressed_msearch_with_a_bad_line_is_a_clear_400(
    entry_url: str, movies_kb: str, encoding: str
) -> None:
    import gzip
    import zlib

    raw = b'{"index": "' + movies_kb.encode() + b'"}\n{not json\n'
    packed = gzip.compress(raw) if encoding == "gzip" else zlib.compress(raw)
    response = httpx.post(
        f"{entry_url}/_msearch",
        content=packed,
        headers={"content-type": "application/x-ndjson", "content-encoding": encoding},
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "json_parse_exception"


def test_an_old_parameter_spelling_still_works_and_the_explain_says_it_is_deprecated(
    entry_url: str, movies_kb: str
) -> None:
    def explained(**params: str) -> dict[str, Any]:
        response = httpx.post(
            f"{entry_url}/{movies_kb}/_search",
            json=QUERY,
            params={"kgqr.strategy": "prf", "kgqr.explain": "true", **params},
            timeout=300,
        )
        assert response.status_code == 200, response.text
        return dict(response.json()["kgqr"])

    old = explained(**{"kgqr.param.prf_docs": "2"})
    assert old["warnings"] == ["[prf_docs] is deprecated: use prf.docs"]
    new = explained(**{"kgqr.param.prf.docs": "2"})
    assert "warnings" not in new and new["expansions"] == old["expansions"]
    assert len(new["expansions"]) == 2  # prf read the request's value, not the setting's


DEMANDING = [
    {"match_phrase": {"text": "American actor"}},
    {"query_string": {"query": '"American actor" Cruise', "default_field": "text"}},
    {"match": {"text": {"query": "Pacino Heat", "operator": "and"}}},
    {"match": {"text": {"query": "American actor Heat", "minimum_should_match": 3}}},
    {"bool": {"must": [{"match": {"text": "actor"}}, {"match": {"title": "Cruise"}}]}},
    {"match": {"type": "person"}},  # a keyword field: kgqr searched "person" in the text
    {"multi_match": {"query": "Heat", "fields": ["title.raw"]}},
]


@pytest.mark.parametrize("strategy", ["base", "graph"])
@pytest.mark.parametrize("query", DEMANDING)
def test_a_query_that_demands_more_than_a_word_gets_only_its_own_hits(
    entry_url: str, movies_kb: str, opensearch: Any, strategy: str, query: dict[str, Any]
) -> None:
    """A phrase, `operator: and`, `minimum_should_match`, two must clauses or a field
    kgqr does not search: through kgqr the k-NN side added every movie and person, under
    a total counting only the caller's hits ("total 1" over 5 hits). The caller's query
    now filters each side."""
    body = {"query": query, "size": 10}
    direct = opensearch.search(index=movies_kb, body=body)
    answer = httpx.post(
        f"{entry_url}/{movies_kb}/_search",
        params={"kgqr.strategy": strategy, "kgqr.explain": "true"},
        json=body,
    ).json()
    assert 0 < len(_ids(direct)) < 8  # the k-NN side alone would bring all 8
    assert sorted(_ids(answer)) == sorted(_ids(direct))
    assert answer["hits"]["total"] == direct["hits"]["total"]
    assert answer["kgqr"]["fallback"] is None and answer["kgqr"]["kept_as_filter"]


def test_a_bare_explain_flag_explains_and_a_wrong_one_is_refused(
    entry_url: str, movies_kb: str
) -> None:
    """`?kgqr.explain` with no value (curl's habit, as `?pretty`) explained nothing, and
    `=maybe` was a silent no; the engine reads its own flags so, and refuses the rest."""
    search, body = f"{entry_url}/{movies_kb}/_search", {"query": {"match": {"text": "Heat"}}}
    bare = httpx.post(f"{search}?kgqr.strategy=base&kgqr.explain", json=body)
    assert bare.status_code == 200 and bare.json()["kgqr"]["strategy"] == "base"
    wrong = httpx.post(f"{search}?kgqr.strategy=base&kgqr.explain=maybe", json=body)
    assert wrong.status_code == 400
    assert wrong.json()["error"]["reason"] == (
        "Failed to parse value [maybe] as only [true] or [false] are allowed."
    )


def test_a_search_template_is_rewritten_like_the_search_it_renders(
    entry_url: str, movies_kb: str, opensearch: Any, unique_name: str
) -> None:
    """Applications keep queries as stored mustache templates; through kgqr a template
    search on a knowledge base went on as it came, never rewritten. The engine renders it
    (as the caller) and kgqr plans what it renders; what passes through, or does not
    render, is the engine's to answer."""
    stored = {"query": {"match": {"text": "{{q}}"}}, "size": "{{n}}"}
    opensearch.put_script(id=unique_name, body={"script": {"lang": "mustache", "source": stored}})
    try:
        search, explained = f"{entry_url}/{movies_kb}/_search", {"kgqr.strategy": "graph"}
        explained["kgqr.explain"] = "true"
        rendered = httpx.post(
            search, params=explained, json={"query": {"match": {"text": "Pacino"}}, "size": 3}
        ).json()
        inline = json.dumps({"query": {"match": {"text": "{{q}}"}}, "size": 3})
        for template in ({"id": unique_name}, {"source": inline}):
            request = {**template, "params": {"q": "Pacino", "n": 3}}
            answer = httpx.post(f"{search}/template", params=explained, json=request).json()
            assert answer["kgqr"]["strategy"] == "graph" and answer["kgqr"]["fallback"] is None
            assert _ids(answer) == _ids(rendered), template
        sorted_by_id = {"source": json.dumps({"query": stored["query"], "sort": ["id"]}),
                        "params": {"q": "American"}}  # fmt: skip
        direct = opensearch.search_template(index=movies_kb, body=sorted_by_id)
        answer = httpx.post(f"{search}/template", params=explained, json=sorted_by_id).json()
        assert _ids(answer) == _ids(direct) and answer["kgqr"]["passed_through"].startswith(
            "sorted"
        )
        missing = {"id": f"{unique_name}-none", "params": {}}
        refused = httpx.post(f"{search}/template", params=explained, json=missing)
        assert refused.status_code == 404
        assert refused.json()["error"]["type"] == "resource_not_found_exception"
        # The request's own explain replaces the template's, as the engine sets it: kgqr
        # kept the template's, and explained every hit the engine would not have. A field
        # the engine does not read is its 400, not a search run with it.
        explaining = {"query": {"match": {"text": "{{q}}"}}, "explain": True}
        says_explain = {"source": json.dumps(explaining), "params": {"q": "Pacino"}}
        for flags in ({}, {"explain": False}):
            asked = {**says_explain, **flags}
            via = httpx.post(f"{search}/template", params=explained, json=asked).json()
            direct = opensearch.search_template(index=movies_kb, body=asked)
            assert not any("_explanation" in hit for hit in via["hits"]["hits"]), flags
            assert not any("_explanation" in hit for hit in direct["hits"]["hits"]), flags
        sized = httpx.post(f"{search}/template", params=explained, json={**says_explain, "size": 1})
        assert sized.status_code == 400, sized.text[:300]
        assert sized.json()["error"]["type"] == "x_content_parse_exception"
        # _msearch/template: the KB item rewritten, the other as the engine answers it; an
        # item the engine will not render sends the whole on as it came.
        pacino = {"id": unique_name, "params": {"q": "Pacino", "n": 3}}
        meta = {"source": json.dumps({"query": {"match_all": {}}, "size": 1})}
        for items, rewritten in (([pacino, meta], True), ([pacino, missing], False)):
            lines = [{"index": movies_kb}, items[0], {"index": "kgqr-meta"}, items[1]]
            ndjson = "".join(json.dumps(line) + "\n" for line in lines)
            multi = httpx.post(f"{entry_url}/_msearch/template", params=explained,
                               content=ndjson, headers=NDJSON).json()["responses"]  # fmt: skip
            direct = opensearch.msearch_template(body=lines)["responses"]
            assert [r["status"] for r in multi] == [r["status"] for r in direct]
            assert ("kgqr" in multi[0]) == rewritten and _ids(multi[0]) == _ids(
                rendered if rewritten else direct[0]
            )
            assert multi[1].get("hits", {}).get("total") == direct[1].get("hits", {}).get("total")
    finally:
        opensearch.delete_script(id=unique_name)


def test_a_template_search_reads_its_url_as_the_engine_does(
    entry_url: str, movies_kb: str, opensearch: Any
) -> None:
    """`_search/template` checks the URL's search parameters (`size`, `explain`, `sort`)
    and then runs the rendered search without them: `?size=1` answers every hit. kgqr
    applied them to the rendered search, and its answer lacked the `"status"` the
    engine's carries. A value the engine refuses stays its 400."""
    source = {"query": {"match": {"text": "{{q}}"}}, "size": 5}
    request = {"source": json.dumps(source), "params": {"q": "American"}}
    path = f"/{movies_kb}/_search/template"
    rewritten = {"kgqr.strategy": "base", "kgqr.explain": "true"}
    for url in ({}, {"size": "1"}, {"explain": "true"}, {"_source": "false"}, {"sort": "id"},
                {"track_total_hits": "1"}):  # fmt: skip
        direct = opensearch.transport.perform_request("POST", path, params=url, body=request)
        via = httpx.post(f"{entry_url}{path}", params={**url, **rewritten}, json=request).json()
        assert via["kgqr"]["strategy"] == "base" and "passed_through" not in via["kgqr"], url
        assert len(_ids(via)) == len(_ids(direct)) > 1, url
        assert via["status"] == direct["status"] == 200, url
        assert via["hits"]["total"] == direct["hits"]["total"], url
        for hit in via["hits"]["hits"]:
            assert "_source" in hit and "_explanation" not in hit, url
    for url in ({"size": "abc"}, {"terminate_after": "-1"}, {"df": "text"}):
        with pytest.raises(RequestError) as refused:
            opensearch.transport.perform_request("POST", path, params=url, body=request)
        via = httpx.post(f"{entry_url}{path}", params={**url, **rewritten}, json=request)
        assert via.status_code == refused.value.status_code == 400, url
        info: Any = refused.value.info
        assert via.json()["error"]["reason"] == info["error"]["reason"], url


def test_a_template_rendered_deeper_than_kgqr_reads_is_the_engines_to_run(
    entry_url: str, movies_kb: str, opensearch: Any
) -> None:
    """A request within kgqr's 128 levels may render past them (its parameters written in
    with `toJson`): such a search is the engine's to run, as a body that deep sent to kgqr
    is its 400."""
    deep: dict[str, Any] = {"match_all": {}}
    while nesting_depth({"p": {"d": deep}}, MAX_NESTING) < MAX_NESTING:
        deep = {"bool": {"filter": deep}}
    source = (
        '{"query": {"bool": {"must": {"match": {"text": "{{q}}"}}, '
        '"filter": {{#toJson}}d{{/toJson}}}}}'
    )
    request = {"source": source, "params": {"q": "American", "d": deep}}
    path = f"/{movies_kb}/_search/template"
    direct = opensearch.transport.perform_request("POST", path, body=request)
    params = {"kgqr.strategy": "base", "kgqr.explain": "true"}
    via = httpx.post(f"{entry_url}{path}", params=params, json=request).json()
    assert "nests deeper" in via["kgqr"]["passed_through"]
    assert _ids(via) == _ids(direct) and len(_ids(direct)) > 1


def test_an_index_named_metrics_is_the_engines_not_kgqrs_counters(
    entry_url: str, opensearch: Any
) -> None:
    """kgqr's counters once sat at `/metrics`, so a client asking whether an index named
    `metrics` existed was told yes, and reading it got Prometheus text."""
    client = OpenSearch(hosts=[entry_url])
    assert httpx.head(f"{entry_url}/metrics").status_code == 404
    assert not client.indices.exists(index="metrics")
    client.indices.create(index="metrics")
    try:
        assert client.indices.exists(index="metrics")
        assert client.indices.get(index="metrics") == opensearch.indices.get(index="metrics")
    finally:
        opensearch.indices.delete(index="metrics")
    assert "kgqr_requests_total" in httpx.get(f"{entry_url}{metrics.PATH}").text
