"""The proxy with unmodified opensearch-py clients, real OpenSearch, Redis and LLM."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opensearchpy import OpenSearch
from opensearchpy.exceptions import NotFoundError

from ingest import job_runner
from kgqr_core.settings import Settings
from kgqr_ops.background_proxy import free_port, running_proxy
from kgqr_ops.nginx_front import running_front
from kgqr_ops.services.local_service import port_of
from plugin import schema
from query_rewriter import metrics

# In the edit-test loop (scripts/test-quick.sh): it needs only the always-on services.
pytestmark = pytest.mark.quick

QUERY: dict[str, Any] = {
    "query": {"match": {"text": "professional bank robbers chased by the police"}},
    "size": 3,
}


@pytest.fixture(scope="module")
def via_proxy(entry_url: str) -> OpenSearch:
    return OpenSearch(hosts=[entry_url], timeout=300)


def _search(url: str, index: str, body: dict[str, Any], **params: str) -> httpx.Response:
    return httpx.post(f"{url}/{index}/_search", json=body, params=params, timeout=300)


def _without_timing(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items() if k not in ("took", "_shards")}
    if isinstance(value, list):
        return [_without_timing(v) for v in value]
    return value


def test_unmanaged_apis_behave_exactly_as_direct(
    via_proxy: OpenSearch, opensearch: Any, unique_name: str
) -> None:
    index = unique_name
    assert via_proxy.indices.create(index=index)["acknowledged"]
    via_proxy.index(index=index, id="1", body={"title": "hello world"}, refresh=True)
    lines: list[dict[str, Any]] = []
    for i in range(2, 5):
        lines += [{"index": {"_index": index, "_id": str(i)}}, {"title": f"doc {i}"}]
    via_proxy.bulk(body=lines, refresh=True)
    try:
        assert via_proxy.get(index=index, id="1") == opensearch.get(index=index, id="1")
        assert via_proxy.count(index=index)["count"] == 4
        query = {"query": {"match": {"title": "hello"}}}
        assert _without_timing(via_proxy.search(index=index, body=query)) == _without_timing(
            opensearch.search(index=index, body=query)
        )
        msearch = [{"index": index}, query, {"index": index}, {"query": {"match_all": {}}}]
        assert _without_timing(via_proxy.msearch(body=msearch)) == _without_timing(
            opensearch.msearch(body=msearch)
        )
        page = via_proxy.search(index=index, body={"size": 2, "query": {"match_all": {}}},
                                scroll="1m")  # fmt: skip
        rest = via_proxy.scroll(scroll_id=page["_scroll_id"], scroll="1m")
        assert len(page["hits"]["hits"]) + len(rest["hits"]["hits"]) == 4
        via_proxy.clear_scroll(scroll_id=rest["_scroll_id"])
        cat = via_proxy.cat.indices(index=index, format="json")
        assert cat[0]["index"] == index and cat[0]["docs.count"] == "4"
        with pytest.raises(NotFoundError):
            via_proxy.get(index=index, id="missing")
    finally:
        via_proxy.indices.delete(index=index)


def _samples(proxy_url: str) -> dict[str, float]:
    """Every series (name and labels, as written) in kgqr's metrics, read in one request."""
    samples = {}
    for line in httpx.get(f"{proxy_url}{metrics.PATH}").text.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            samples[series] = float(value)
    return samples


def _sample(proxy_url: str, series: str) -> float | None:
    return _samples(proxy_url).get(series)


def _passthrough_count(proxy_url: str) -> float:
    return _sample(proxy_url, 'kgqr_requests_total{kind="passthrough",status="200"}') or 0.0


def test_the_front_sends_only_kgqr_traffic_through_kgqr(
    settings: Settings, proxy_url: str, movies_kb: str
) -> None:
    with running_front(settings, "127.0.0.1", free_port(), port_of(proxy_url, 0)) as front:
        before = _passthrough_count(proxy_url)
        assert httpx.get(f"{front}/_cluster/health").json()["status"] in ("green", "yellow")
        assert _passthrough_count(proxy_url) == before, "a plain request went through kgqr"
        assert "kgqr_requests_total" in httpx.get(f"{front}{metrics.PATH}").text
        assert httpx.get(f"{front}/_kgqr/tune").status_code == 200
        explained = _search(front, movies_kb, QUERY, **{"kgqr.explain": "true"}).json()
        assert explained["kgqr"]["strategy"] == "base"
        # OpenSearch rejects kgqr's parameters, so a request carrying one goes to kgqr.
        plain = httpx.get(f"{front}/_cat/health", params={"kgqr.explain": "true"})
        assert plain.status_code == 200
        assert httpx.get(f"{settings.opensearch.url}/_cat/health",
                         params={"kgqr.explain": "true"}).status_code == 400  # fmt: skip
        assert _passthrough_count(proxy_url) == before + 1


def _front_requests(proxy_url: str, front_port: int) -> float:
    value = _sample(proxy_url, f'kgqr_front_requests_total{{front_port="{front_port}"}}')
    assert value is not None, f"no counters for the front on port {front_port} in {metrics.PATH}"
    return value


def test_kgqr_metrics_count_what_the_front_passes_straight_through(
    settings: Settings, proxy_url: str
) -> None:
    front_port = free_port()
    with running_front(settings, "127.0.0.1", front_port, port_of(proxy_url, 0)) as front:
        before = _front_requests(proxy_url, front_port)
        for _ in range(3):
            assert httpx.get(f"{front}/_cluster/health").status_code == 200
        # One more: reading the counters is itself a request to the front.
        assert _front_requests(proxy_url, front_port) == before + 4
    assert f'front_port="{front_port}"' not in httpx.get(f"{proxy_url}{metrics.PATH}").text


def test_opensearch_errors_pass_through_unchanged(entry_url: str, settings: Settings) -> None:
    body = {"query": {"match": {"text": "x"}}}
    proxied = httpx.post(f"{entry_url}/kgqr-no-such-documents/_search", json=body)
    direct = httpx.post(f"{settings.opensearch.url}/kgqr-no-such-documents/_search", json=body)
    assert proxied.status_code == direct.status_code == 404
    assert proxied.json()["error"] == direct.json()["error"]


def test_pass_through_is_byte_for_byte(
    entry_url: str, settings: Settings, opensearch: Any, unique_name: str
) -> None:
    """Compressed answers stay compressed, HEAD keeps its length, kgqr's own parameters
    never reach OpenSearch (which would reject them)."""
    index = unique_name
    opensearch.index(index=index, id="1", body={"title": "hello"}, refresh=True)
    gzip = {"accept-encoding": "gzip"}
    try:
        with httpx.Client(timeout=60) as client:
            proxied = client.get(f"{entry_url}/{index}/_search", headers=gzip)
            direct = client.get(f"{settings.opensearch.url}/{index}/_search", headers=gzip)
            assert proxied.headers["content-encoding"] == "gzip"
            assert proxied.headers["content-encoding"] == direct.headers.get("content-encoding")
            assert proxied.json()["hits"] == direct.json()["hits"]
            plain = client.get(f"{entry_url}/{index}/_search",
                               headers={"accept-encoding": "identity"})  # fmt: skip
            assert "content-encoding" not in plain.headers and plain.json()["hits"]["hits"]
            head = client.head(f"{entry_url}/{index}")
            assert head.status_code == 200
            assert (
                head.headers["content-length"]
                == client.head(f"{settings.opensearch.url}/{index}").headers["content-length"]
            )
            cat = client.get(f"{entry_url}/_cat/indices/{index}",
                             params={"format": "json", "kgqr.explain": "true"})  # fmt: skip
            assert cat.status_code == 200 and cat.json()[0]["index"] == index
    finally:
        opensearch.indices.delete(index=index)


def test_managed_index_gets_a_hybrid_search(entry_url: str, movies_kb: str) -> None:
    response = _search(entry_url, movies_kb, QUERY, **{"kgqr.explain": "true"})
    assert response.status_code == 200
    result = response.json()
    explain = result["kgqr"]
    assert explain["strategy"] == "base" and explain["fallback"] is None
    hybrid = explain["final_query"]["query"]["hybrid"]["queries"]
    # The BM25 side searches the expanded text among what the caller's query matches.
    assert "multi_match" in hybrid[0]["bool"]["must"][0] and "knn" in hybrid[1]
    assert hybrid[0]["bool"]["filter"] == [QUERY["query"]]
    assert result["hits"]["hits"][0]["_id"] == "m1"
    assert "kgqr" not in _search(entry_url, movies_kb, QUERY).json()


def test_client_filters_sort_and_paging_are_preserved(proxy_url: str, movies_kb: str) -> None:
    body = {
        "query": {"bool": {"must": [{"match": {"text": "American actor"}}],
                           "filter": [{"term": {"type": "person"}}]}},
        "size": 2, "from": 1, "_source": ["title", "type"],
        "aggs": {"types": {"terms": {"field": "type"}}},
    }  # fmt: skip
    result = _search(proxy_url, movies_kb, body, **{"kgqr.explain": "true"}).json()
    hits = result["hits"]["hits"]
    assert len(hits) == 2 and all(hit["_source"]["type"] == "person" for hit in hits)
    assert set(hits[0]["_source"]) == {"title", "type"}
    assert [b["key"] for b in result["aggregations"]["types"]["buckets"]] == ["person"]
    assert result["kgqr"]["final_query"]["query"]["hybrid"]["pagination_depth"] >= 3


def test_malformed_requests_get_opensearch_style_errors(entry_url: str, movies_kb: str) -> None:
    bad_json = httpx.post(f"{entry_url}/{movies_kb}/_search", content=b"{not json",
                          headers={"content-type": "application/json"})  # fmt: skip
    assert bad_json.status_code == 400
    assert bad_json.json()["error"]["type"] == "json_parse_exception"
    assert bad_json.json()["status"] == 400
    unknown = _search(entry_url, movies_kb, QUERY, **{"kgqr.strategy": "magic"})
    assert unknown.status_code == 400
    assert (
        "hyde" in unknown.json()["error"]["reason"] and "magic" in unknown.json()["error"]["reason"]
    )
    huge = httpx.post(f"{entry_url}/{movies_kb}/_search", content=b"x" * (11 * 1024 * 1024),
                      headers={"content-type": "application/json"})  # fmt: skip
    assert huge.status_code == 413
    assert huge.json()["error"]["type"] == "content_too_long_exception"
    odd_msearch = httpx.post(f"{entry_url}/_msearch", content=b'{"index": "x"}\n',
                             headers={"content-type": "application/x-ndjson"})  # fmt: skip
    assert odd_msearch.status_code == 400


def _gzip_members(*parts: bytes) -> bytes:
    import gzip

    return b"".join(gzip.compress(part) for part in parts)


# Rendered into the query unquoted: no JSON.
UNQUOTED = json.dumps({"source": '{"query": {{q}}}', "params": {"q": "abc"}}).encode()
NOT_A_FLAG = json.dumps({"source": '{"query": {"match_all": {}}}', "explain": "maybe"}).encode()
A_FLAG = json.dumps({"source": '{"query": {"match_all": {}}}', "explain": "true"}).encode()
MALFORMED: list[tuple[str, dict[str, str], bytes, dict[str, str]]] = [
    ("_search", {}, b'{"query": {"match": {"text": "film \\ud800"}}}', {}),
    ("_search/template", {}, UNQUOTED, {}),
    ("_search/template", {}, NOT_A_FLAG, {}),
    ("_search", {"size": "99999999999"}, json.dumps(QUERY).encode(), {}),
    ("_search", {"from": "5_000"}, json.dumps(QUERY).encode(), {}),
    ("_search", {}, b'{"size": 1, "size": 2, "query": {"match": {"text": "film"}}}', {}),
    ("_search", {"pretty": "maybe"}, json.dumps(QUERY).encode(), {}),
    ("_search", {"q": "film", "lenient": "maybe"}, b"", {}),
    ("_msearch", {}, b'{}\n{"query": {"match": {"text": "film"}}}', {}),
    ("_msearch", {}, b'{}\n{"query": {"match": {"text": "film"}}}\n{}\n', {}),
    ("_msearch", {"max_concurrent_searches": "abc"}, b'{}\n{"size": 1}\n', {}),
    ("_search", {}, _gzip_members(b'{"size": 1}', b'{"size": 2}'), {"content-encoding": "gzip"}),
    ("_search", {}, _gzip_members(b'{"size"', b": 1}"), {"content-encoding": "gzip"}),
    # ... and what a fix of those first refused that the engine runs (a review of it):
    ("_msearch", {}, b'{}\n{"size": 1}\n\n{"size": 2}\n', {}),  # a blank header: {}
    ("_search", {}, _gzip_members(b'{"size": 1}') + b"\n", {"content-encoding": "gzip"}),
    ("_search", {"pretty": " "}, json.dumps(QUERY).encode(), {}),
    ("_search", {"size": "000000000005"}, json.dumps(QUERY).encode(), {}),
    ("_search/template", {}, A_FLAG, {}),
    # Comments, which the engine's reader skips, and what is not an object.
    ("_search", {}, b'{"size": 1 /* one */, "query": {"match": {"text": "film"}}}', {}),
    ("_search", {}, b'{"size": 1, // one\n "query": {"match": {"text": "film"}}}', {}),
    ("_search", {}, b'{"query": {"match": {"text": "film // not a comment"}}} /* open', {}),
    ("_msearch", {}, b'{} // all\n{"query": {"match": {"text": "film"}}} /**/\n', {}),
    ("_search", {}, b'["film"]', {}),
    ("_search", {}, b" \n", {}),
    ("_search", {}, b"/* only */", {}),
    ("_search", {}, b'{"size": 1 /* \x01 */}', {}),
    ("_search", {}, b'{"size": 1} {"size": 2}', {}),
    ("_search", {}, b'{"query": {"match": {"text": "fil', {}),
    # An msearch line is read to its object's end: what follows is the engine's to skip.
    ("_msearch", {}, b'{} x\n{"query": {"match": {"text": "film"}}} {"size": 2}\n', {}),
]


@pytest.mark.parametrize(("path", "params", "body", "headers"), MALFORMED)
def test_a_malformed_request_is_answered_as_the_engine_answers_it(
    entry_url: str, movies_kb: str, settings: Settings,
    path: str, params: dict[str, str], body: bytes, headers: dict[str, str],
) -> None:  # fmt: skip
    kind = "application/x-ndjson" if path == "_msearch" else "application/json"
    sent = {"content-type": kind, **headers}
    direct = httpx.post(f"{settings.opensearch.url.rstrip('/')}/{movies_kb}/{path}",
                        params=params, content=body, headers=sent)  # fmt: skip
    via = httpx.post(f"{entry_url}/{movies_kb}/{path}", content=body, headers=sent,
                     params={**params, "kgqr.strategy": "graph"})  # fmt: skip
    assert via.status_code == direct.status_code, (via.text[:300], direct.text[:300])
    if direct.status_code == 200 and path == "_msearch":
        assert len(via.json()["responses"]) == len(direct.json()["responses"])
    if direct.status_code != 200 and "reason" in direct.text:
        assert via.json()["error"]["type"] == direct.json()["error"]["type"]
        reason = direct.json()["error"]["reason"]
        if reason.startswith(("Failed to parse", "The msearch", "maxConcurrent", "Expected")):
            assert via.json()["error"]["reason"] == reason


def test_a_body_nested_deep_enough_to_stop_the_engine_is_a_400(
    entry_url: str, movies_kb: str, settings: Settings
) -> None:
    """OpenSearch 2.19 parsing ~330 nested bools overflows its stack and the node exits;
    through kgqr such a search, or such an msearch line, is a 400 and the engine lives."""
    query = '{"match_all": {}}'
    for _ in range(333):  # written by hand: the standard library's writer stops at ~1,000
        query = '{"bool": {"must": [' + query + "]}}"
    deep = b'{"query": %s}' % query.encode()
    for path, body in [
        ("_search", deep),
        ("_msearch", b'{"index": "%s"}\n%s\n' % (movies_kb.encode(), deep)),
    ]:
        refused = httpx.post(f"{entry_url}/{movies_kb}/{path}", content=body,
                             headers={"content-type": "application/json"})  # fmt: skip
        assert refused.status_code == 400, path
        assert refused.json()["error"]["type"] == "parse_exception"
        assert "deeper than" in refused.json()["error"]["reason"]
    assert httpx.get(settings.opensearch.url).status_code == 200


def test_a_request_line_the_engine_would_refuse_is_refused_as_it_would(
    entry_url: str, movies_kb: str, settings: Settings
) -> None:
    """The engine refuses a line over 4 KB before reading anything; kgqr sends a shorter
    line of its own, so it passed such a search, and read 800 filter paths for it."""
    paths = {"filter_path": ",".join(f"hits.hits.f{n}" for n in range(400))}
    via = httpx.post(f"{entry_url}/{movies_kb}/_search", json=QUERY, params=paths)
    direct = httpx.post(f"{settings.opensearch.url.rstrip('/')}/{movies_kb}/_search",
                        json=QUERY, params=paths)  # fmt: skip
    assert via.status_code == direct.status_code == 400
    assert via.json()["error"]["type"] == direct.json()["error"]["type"]
    assert via.json()["error"]["reason"] == direct.json()["error"]["reason"]
    shorter = {"filter_path": ",".join(f"hits.hits.f{n}" for n in range(200))}
    assert httpx.post(f"{entry_url}/{movies_kb}/_search", json=QUERY, params=shorter).is_success


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded"])
def test_a_body_of_a_type_the_engine_refuses_is_refused_as_the_engine_refuses_it(
    entry_url: str, movies_kb: str, settings: Settings, content_type: str
) -> None:
    """A cross-site form can send text/plain; kgqr read it as JSON and rewrote the search
    (an LLM call for the caller) where the engine answers 406."""
    body, headers = json.dumps(QUERY).encode(), {"content-type": content_type}
    via = httpx.post(f"{entry_url}/{movies_kb}/_search", params={"kgqr.strategy": "hyde"},
                     content=body, headers=headers)  # fmt: skip
    direct = httpx.post(f"{settings.opensearch.url.rstrip('/')}/{movies_kb}/_search",
                        content=body, headers=headers)  # fmt: skip
    assert via.status_code == direct.status_code == 406
    assert via.json() == direct.json()


def test_a_search_body_past_the_engines_limit_is_a_413_at_once(
    entry_url: str, movies_kb: str
) -> None:
    """The front reads a search's body to disk before sending it (to send it again to
    another node): unbounded, one upload could fill the disk."""
    import socket
    from urllib.parse import urlsplit

    address = urlsplit(entry_url)
    with socket.create_connection((address.hostname, address.port), timeout=30) as sock:
        sock.sendall(
            f"POST /{movies_kb}/_search HTTP/1.1\r\nHost: x\r\n"
            "Content-Type: application/json\r\nContent-Length: 200000000\r\n\r\n".encode()
        )
        head = sock.recv(4096).decode(errors="replace")
    assert head.startswith("HTTP/1.1 413"), head[:200]
    assert "content_too_long_exception" in head


@pytest.mark.parametrize(("kind", "path"), [("search", "_search"), ("passthrough", "_count")])
def test_a_client_gone_while_sending_its_body_is_a_499_not_a_failure(
    proxy_url: str, movies_kb: str, kind: str, path: str
) -> None:
    """A client that hangs up halfway through its body (a timeout, a killed app) was
    counted and logged as a kgqr bug (a 500, with a traceback) where kgqr reads the body,
    and as OpenSearch unreachable (a 502) where it streams the body on."""
    import socket
    import time
    from urllib.parse import urlsplit

    gone, failed, unreachable = (f'kgqr_requests_total{{kind="{kind}",status="{status}"}}'
                                 for status in (499, 500, 502))  # fmt: skip
    before = _samples(proxy_url)
    address = urlsplit(proxy_url)
    with socket.create_connection((address.hostname, address.port), timeout=30) as sock:
        sock.sendall(
            f"POST /{movies_kb}/{path} HTTP/1.1\r\nHost: x\r\n"
            "Content-Type: application/json\r\nContent-Length: 400\r\n\r\n"
            '{"query": {"match": '.encode()
        )
    deadline = time.monotonic() + 30
    while (now := _samples(proxy_url)).get(gone, 0.0) == before.get(gone, 0.0):
        counted = {series: value for series, value in now.items() if kind in series}
        assert time.monotonic() < deadline, f"the abandoned request was not counted: {counted}"
        time.sleep(0.2)
    assert now[gone] == before.get(gone, 0.0) + 1
    for series in (failed, unreachable):
        assert now.get(series, 0.0) == before.get(series, 0.0), series


def test_headers_past_the_engines_bound_get_its_400_at_once(
    entry_url: str, movies_kb: str, settings: Settings
) -> None:
    """A 10 KB header (a long bearer token in a header of its own) is over the engine's
    8 KB: it answers 400 at once. Sent on by kgqr, nothing answered for a minute, then
    kgqr's 502."""
    long_token = {"x-team-token": "t" * 10_000}
    via = httpx.post(f"{entry_url}/{movies_kb}/_search", json=QUERY, headers=long_token,
                     timeout=30)  # fmt: skip
    direct = httpx.post(f"{settings.opensearch.url.rstrip('/')}/{movies_kb}/_search",
                        json=QUERY, headers=long_token, timeout=30)  # fmt: skip
    assert via.status_code == direct.status_code == 400
    assert via.json()["error"]["type"] == direct.json()["error"]["type"]


def test_the_engines_own_explain_of_a_rewritten_hit_explains_its_score(
    entry_url: str, movies_kb: str
) -> None:
    """`explain: true` gave each hit the raw sub-queries' scores ("combined score of"),
    not the normalised score the hit carries: the value did not match `_score`."""
    body = {**QUERY, "explain": True}
    hits = _search(entry_url, movies_kb, body, **{"kgqr.strategy": "base"}).json()["hits"]
    assert hits["hits"]
    for hit in hits["hits"]:
        assert hit["_explanation"]["value"] == pytest.approx(hit["_score"], abs=1e-4), hit


def test_a_hit_fused_in_kgqr_is_explained_as_its_fused_score(
    settings: Settings, movies_kb: str
) -> None:
    """Fused in kgqr (no neural-search, or a caller under DLS), a hit carried the first
    sub-search's explanation beside its RRF score."""
    body = {**QUERY, "explain": True}
    with running_proxy(settings.replaced({"hybrid_fusion": "client"})) as url:
        hits = _search(url, movies_kb, body, **{"kgqr.strategy": "base"}).json()["hits"]
    assert hits["hits"]
    for hit in hits["hits"]:
        assert hit["_explanation"]["value"] == pytest.approx(hit["_score"], abs=1e-6), hit


@pytest.mark.parametrize("paging", [{"size": "abc"}, {"size": None}, {"from": "x"}])
def test_paging_the_engine_refuses_gets_the_engines_error(
    entry_url: str, movies_kb: str, settings: Settings, paging: dict[str, Any]
) -> None:
    """kgqr read a body's size with int(): "abc" or null was a plain-text 500."""
    body = {**QUERY, **paging}
    via = _search(entry_url, movies_kb, body, **{"kgqr.strategy": "graph"})
    direct = httpx.post(f"{settings.opensearch.url.rstrip('/')}/{movies_kb}/_search", json=body)
    assert via.status_code == direct.status_code == 400
    assert via.json()["error"]["type"] == direct.json()["error"]["type"]
    coerced = _search(entry_url, movies_kb, {**QUERY, "size": "2"}, **{"kgqr.strategy": "graph"})
    assert len(coerced.json()["hits"]["hits"]) == 2  # "2" is a size, as the engine reads it


def test_a_kgqr_bug_costs_the_rewrite_not_the_search(
    settings: Settings, movies_kb: str, opensearch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure in kgqr's own code after the rewrite (building the hybrid body) answers
    the plain query, as a failing strategy does; one anywhere else is an error in
    OpenSearch's shape, not a plain-text 500."""

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug")

    params = {"kgqr.strategy": "graph", "kgqr.explain": "true"}
    direct = opensearch.search(index=movies_kb, body=QUERY)
    with running_proxy(settings) as url:
        monkeypatch.setattr("query_rewriter.search.service.hybrid_body", broken)
        plain = _search(url, movies_kb, QUERY, **params)
        monkeypatch.setattr("query_rewriter.proxy.app.plan_search", broken)
        failed = _search(url, movies_kb, QUERY, **params)
    assert plain.status_code == 200
    assert [h["_id"] for h in plain.json()["hits"]["hits"]] == [
        h["_id"] for h in direct["hits"]["hits"]
    ]
    assert plain.json()["kgqr"]["fallback"]["stage"] == "search"
    assert "RuntimeError: a bug" in plain.headers["x-kgqr-fallback"]
    assert failed.status_code == 500
    assert failed.json()["error"] == {
        "root_cause": [{"type": "kgqr_exception", "reason": "kgqr failed: RuntimeError"}],
        "type": "kgqr_exception",
        "reason": "kgqr failed: RuntimeError",
    }


def test_ext_kgqr_is_removed_before_forwarding(entry_url: str, movies_kb: str) -> None:
    body = {**QUERY, "ext": {"kgqr": {"strategy": "base", "explain": True}}}
    result = _search(entry_url, movies_kb, body).json()
    assert result["kgqr"]["strategy"] == "base"
    assert "ext" not in result["kgqr"]["final_query"]


def test_msearch_rewrites_managed_items_and_keeps_the_rest(
    via_proxy: OpenSearch, movies_kb: str
) -> None:
    body = [{"index": movies_kb}, QUERY, {"index": "kgqr-meta"}, {"query": {"match_all": {}}}]
    result = via_proxy.msearch(body=body, params={"kgqr.explain": "true"})
    first, second = result["responses"]
    assert first["status"] == 200 and first["kgqr"]["strategy"] == "base"
    assert first["hits"]["hits"][0]["_id"] == "m1"
    assert second["status"] == 200 and second["hits"]["total"]["value"] > 0
    assert second["kgqr"] == {"passed_through": "[kgqr-meta] is not one knowledge base's "
                              "documents index (kgqr-KB-documents) nor an index attached as "
                              "one (kgqr kb attach)"}  # fmt: skip


def test_msearch_parameters_shape_every_item_rewritten_or_not(
    proxy_url: str, movies_kb: str, settings: Settings
) -> None:
    """A results item and a facets item (size 0: passed through), as opensearch-java
    (typed_keys) and Dashboards (rest_total_hits_as_int) send them: the passed-through item
    was sent with its header's parameters alone, and answered in another shape."""
    facets = {"size": 0, "aggs": {"kinds": {"terms": {"field": "type"}}}}
    lines = [{"index": movies_kb}, QUERY, {"index": movies_kb}, facets]
    content = "".join(json.dumps(line) + "\n" for line in lines)
    params = {"typed_keys": "true", "rest_total_hits_as_int": "true"}
    headers = {"content-type": "application/x-ndjson"}
    via, direct = (
        httpx.post(f"{url}/_msearch", params=params, content=content, headers=headers).json()
        for url in (proxy_url, settings.opensearch.url)
    )
    for answers in (via, direct):
        results, counted = answers["responses"]
        assert isinstance(results["hits"]["total"], int), results["hits"]
        assert isinstance(counted["hits"]["total"], int), counted["hits"]
        assert set(counted["aggregations"]) == {"sterms#kinds"}, counted["aggregations"]
    assert via["responses"][1]["hits"]["total"] == direct["responses"][1]["hits"]["total"]


@pytest.mark.parametrize("strategy", ["prf", "hyde", "rar", "agr"])
def test_each_baseline_strategy_expands_the_query(
    proxy_url: str, movies_kb: str, llm_settings: Settings, strategy: str
) -> None:
    response = _search(proxy_url, movies_kb, QUERY,
                       **{"kgqr.strategy": strategy, "kgqr.explain": "true"})  # fmt: skip
    explain = response.json()["kgqr"]
    assert explain["fallback"] is None, explain["fallback"]
    assert explain["strategy"] == strategy
    assert explain["expansions"] and all(e.strip() for e in explain["expansions"])
    expected_calls = {"prf": 0, "hyde": 1, "rar": 1, "agr": 5}[strategy]
    assert explain["llm_calls"] == expected_calls
    assert explain["final_query"]["query"]["hybrid"]["queries"][0]["bool"]["must"][0][
        "multi_match"
    ]["query"].startswith(QUERY["query"]["match"]["text"])
    assert response.json()["hits"]["hits"]


# What the cache tests ask of hyde: one hypothetical document, not three. They check who
# is served a rewrite, not what the LLM writes, and each document took ~8 s of the LLM.
ONE_DOCUMENT = {"kgqr.param.rewrite.n": "1"}


def _fresh_queries(topic: str, unique_name: str) -> Iterator[dict[str, Any]]:
    """Queries no earlier run has cached (Redis outlives test runs), a few: the 1.5B model,
    sampling, now and then answers `{"documents": []}` (1 query in 20 here, and a CI run
    failed on it), and that rewrite rightly falls back, uncached. The cache tests are about
    who is served a rewrite, not what the LLM writes, so they take the next query then."""
    for attempt in range(3):
        yield {**QUERY, "query": {"match": {"text": f"{topic} {unique_name}-{attempt}"}}}


def test_repeat_rewrite_is_served_from_the_cache(
    proxy_url: str, movies_kb: str, llm_settings: Settings, unique_name: str
) -> None:
    params = {"kgqr.strategy": "hyde", "kgqr.explain": "true", **ONE_DOCUMENT}
    for query in _fresh_queries("bank robbers", unique_name):
        first = _search(proxy_url, movies_kb, query, **params).json()["kgqr"]
        if first["fallback"] is None:
            break
    assert first["fallback"] is None, first["fallback"]
    second = _search(proxy_url, movies_kb, query, **params).json()["kgqr"]
    assert first["cached"] is False and first["llm_calls"] == 1
    assert second["cached"] is True and second["expansions"] == first["expansions"]
    other_caller = httpx.post(
        f"{proxy_url}/{movies_kb}/_search",
        json=query,
        params=params,
        headers={"authorization": "Basic dGVuYW50Yjpw"},
        timeout=300,
    )
    # Without a security plugin OpenSearch ignores the credentials, so the search succeeds,
    # but a different caller never gets another caller's cached rewrite.
    assert other_caller.status_code == 200
    assert other_caller.json()["kgqr"]["cached"] is False


def test_identical_concurrent_rewrites_share_one_llm_call(
    proxy_url: str, movies_kb: str, llm_settings: Settings, unique_name: str
) -> None:
    import asyncio

    params = {"kgqr.strategy": "hyde", "kgqr.explain": "true", **ONE_DOCUMENT}

    async def both(query: dict[str, Any]) -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=300) as client:
            url = f"{proxy_url}/{movies_kb}/_search"
            return await asyncio.gather(
                *(client.post(url, json=query, params=params) for _ in range(2))
            )

    for query in _fresh_queries("heist movie", unique_name):
        explains = [r.json()["kgqr"] for r in asyncio.run(both(query))]
        if all(e["fallback"] is None for e in explains):
            break
    assert [e["fallback"] for e in explains] == [None, None]
    assert sorted(e["cached"] for e in explains) == [False, True]
    assert explains[0]["expansions"] == explains[1]["expansions"]


def _dead_llm_and_uncached_query(settings: Settings, unique_name: str) -> tuple[Settings, dict]:
    """Settings whose LLM port has nothing behind it, and a query no cache holds (Redis
    outlives test runs), so an LLM strategy really asks the LLM and fails."""
    dead = settings.replaced({"llm_base_url": f"http://127.0.0.1:{free_port()}/v1"})
    text = f"{QUERY['query']['match']['text']} {unique_name}"
    return dead, {**QUERY, "query": {"match": {"text": text}}}


def test_a_dead_llm_degrades_to_the_plain_query(
    settings: Settings, movies_kb: str, unique_name: str
) -> None:
    dead, query = _dead_llm_and_uncached_query(settings, unique_name)
    with running_proxy(dead) as url:
        params = {"kgqr.strategy": "hyde", "kgqr.explain": "true"}
        response = _search(url, movies_kb, query, **params)
    assert response.status_code == 200
    explain = response.json()["kgqr"]
    assert explain["fallback"]["stage"] == "generate"
    assert response.headers["x-kgqr-fallback"].startswith("generate: ")
    assert explain["strategy"] == "base" and explain["expansions"] == []
    assert response.json()["hits"]["hits"][0]["_id"] == "m1"


def test_every_rewrite_lands_in_the_query_log(
    settings: Settings, opensearch: Any, movies_kb: str, unique_name: str
) -> None:
    dead, query = _dead_llm_and_uncached_query(settings, unique_name)
    with running_proxy(dead) as url:
        assert _search(url, movies_kb, query, **{"kgqr.strategy": "base"}).status_code == 200
        assert _search(url, movies_kb, query, **{"kgqr.strategy": "hyde"}).status_code == 200
        # A filter nothing matches: a zero-hit entry. A size-0 search (a UI's facets) is
        # not rewritten, so not logged: it would count as a query that found nothing.
        text = query["query"]["match"]["text"]
        nothing = {"must": [{"match": {"text": text}}], "filter": [{"term": {"type": "none"}}]}
        assert _search(url, movies_kb, {"query": {"bool": nothing}}).status_code == 200
        assert _search(url, movies_kb, {**query, "size": 0}).status_code == 200
    # Leaving the proxy flushes its queue; the entries are then searchable.
    opensearch.indices.refresh(index=schema.QUERY_LOG_INDEX)
    found = opensearch.search(
        index=schema.QUERY_LOG_INDEX,
        body={
            "query": {"term": {"query.raw": query["query"]["match"]["text"]}},
            "sort": [{"timestamp": "asc"}],
            "size": 10,
        },
    )["hits"]["hits"]
    entries = sorted(
        (hit["_source"] for hit in found), key=lambda e: (e["strategy"], e["hit_count"])
    )
    assert [(e["strategy"], e["fell_back"], e["zero_hits"]) for e in entries] == [
        ("base", 0, 1), ("base", 0, 0), ("hyde", 1, 0),
    ]  # fmt: skip
    base, hyde = entries[1], entries[2]
    assert base["kb"] == "proxy-movies" and base["index"] == movies_kb
    assert base["hit_count"] == 3 and base["total_hits"] >= 3 and base["status"] == 200
    assert base["total_ms"] > 0 and base["stages_ms"]["search"] > 0
    assert hyde["fallback_stage"] == "generate" and hyde["applied_strategy"] == "base"


def test_metrics_count_requests_cache_hits_and_fallbacks(
    settings: Settings, movies_kb: str, unique_name: str
) -> None:
    """Counts are read as deltas: the registry is shared by every proxy this process runs."""
    dead, query = _dead_llm_and_uncached_query(settings, unique_name)
    series = {
        "searches": 'kgqr_requests_total{kind="search",status="200"}',
        "hits": 'kgqr_rewrite_cache_total{result="hit"}',
        "misses": 'kgqr_rewrite_cache_total{result="miss"}',
        "fallbacks": 'kgqr_fallbacks_total{stage="generate",strategy="hyde"}',
        "base_computed": 'kgqr_rewrite_seconds_count{strategy="base"}',
        "hyde_computed": 'kgqr_rewrite_seconds_count{strategy="hyde"}',
    }
    with running_proxy(dead) as url:
        before = _samples(url)
        for strategy in ("base", "base", "hyde"):
            assert _search(url, movies_kb, query, **{"kgqr.strategy": strategy}).status_code == 200
        after = _samples(url)
    delta = {name: after.get(s, 0.0) - before.get(s, 0.0) for name, s in series.items()}
    # base twice (a miss, then a hit, which is not timed), hyde once (its LLM call fails).
    assert delta == {"searches": 3, "hits": 1, "misses": 2, "fallbacks": 1,
                     "base_computed": 1, "hyde_computed": 1}  # fmt: skip


def test_client_side_fusion_when_the_pipeline_is_not_used(
    settings: Settings, movies_kb: str
) -> None:
    client_fusion = settings.replaced({"hybrid_fusion": "client"})
    with running_proxy(client_fusion) as url:
        result = _search(url, movies_kb, QUERY, **{"kgqr.explain": "true"}).json()
    hits = result["hits"]["hits"]
    assert hits[0]["_id"] == "m1"
    # RRF scores: 1/(60+rank) summed over the BM25 and k-NN rankings.
    assert hits[0]["_score"] == pytest.approx(2 / 61, abs=1e-6)
    assert result["kgqr"]["fallback"] is None


def test_a_requests_bm25_weight_decides_between_the_two_rankings(
    proxy_url: str, movies_kb: str, opensearch: Any
) -> None:
    """`hybrid.bm25=1` ranks as BM25 alone, `0` as k-NN alone: the weight reaches the
    engine as the request's own pipeline, not the shared one."""
    text = "an American actor in a crime film"  # matched by every document
    # BM25 as the rewrite's text side reads it: title and text (query_text.WORD_FIELDS).
    lexical = {"multi_match": {"query": text, "fields": ["title^2", "text"]}}
    bm25 = opensearch.search(index=movies_kb, body={"query": lexical})
    bm25_ids = [hit["_id"] for hit in bm25["hits"]["hits"]]

    def ranked(weight: float) -> tuple[list[str], dict[str, Any]]:
        response = httpx.post(
            f"{proxy_url}/{movies_kb}/_search",
            params={"kgqr.strategy": "base", "kgqr.param.hybrid.bm25": str(weight),
                    "kgqr.explain": "true"},
            json={"query": {"match": {"text": text}}, "size": 10},
            timeout=60,
        )  # fmt: skip
        assert response.status_code == 200, response.text
        return [hit["_id"] for hit in response.json()["hits"]["hits"]], response.json()["kgqr"]

    only_bm25, explain = ranked(1.0)
    assert only_bm25[: len(bm25_ids)] == bm25_ids
    weights = explain["final_query"]["search_pipeline"]["phase_results_processors"][0]
    assert weights["normalization-processor"]["combination"]["parameters"]["weights"] == [1.0, 0.0]
    only_knn, _ = ranked(0.0)
    assert only_knn != only_bm25  # the same matches, ranked by vector alone


def test_default_strategy_none_passes_searches_through(
    settings: Settings, movies_kb: str, opensearch: Any
) -> None:
    """`none` is how a user configures no default (env and TOML have no null; unset means
    `base`): it used to be read as a strategy named "none", a 400 on every search."""
    configured = settings.replaced({"rewrite_default_strategy": "none"})
    direct = opensearch.search(index=movies_kb, body=QUERY)
    with running_proxy(configured) as url:
        plain = _search(url, movies_kb, QUERY, **{"kgqr.explain": "true"})
        asked = _search(url, movies_kb, QUERY, **{"kgqr.strategy": "base"})
    assert plain.status_code == 200, plain.text
    assert plain.json()["kgqr"] == {"passed_through": plain.json()["kgqr"]["passed_through"]}
    assert "no strategy" in plain.json()["kgqr"]["passed_through"]
    assert [h["_id"] for h in plain.json()["hits"]["hits"]] == [
        h["_id"] for h in direct["hits"]["hits"]
    ]
    assert asked.status_code == 200 and "kgqr" not in asked.json()  # a request still may


def test_the_engine_pipeline_follows_the_weight_setting(
    settings: Settings, opensearch: Any
) -> None:
    """A pipeline left with other weights (an earlier KGQR_HYBRID_WEIGHTS) is replaced
    when the proxy starts: it used to be installed only when missing, so the engine kept
    the old weights while kgqr's own fusion used the new ones."""
    path = f"/_search/pipeline/{schema.HYBRID_PIPELINE}"
    stale = schema.hybrid_pipeline((0.6, 0.4))
    opensearch.transport.perform_request("PUT", path, body=stale)
    with running_proxy(settings):
        installed = opensearch.transport.perform_request("GET", path)[schema.HYBRID_PIPELINE]
    assert installed == schema.hybrid_pipeline(settings.rewrite.hybrid_weights) != stale


def test_an_ingest_puts_missing_pipelines_only_and_with_the_weights_set(
    settings: Settings, opensearch: Any, neo4j_driver: Any
) -> None:
    """Every ingest installs kgqr's definitions: it put the default weights back, under a
    proxy set otherwise that fuses with its own where it fuses itself (and a worker set
    otherwise would put its own). The proxy puts its weights at start; an ingest puts a
    missing pipeline only."""
    path = f"/_search/pipeline/{schema.HYBRID_PIPELINE}"
    weighted = settings.replaced({"hybrid_weights": [0.6, 0.4]})

    def installed() -> Any:
        return opensearch.transport.perform_request("GET", path)[schema.HYBRID_PIPELINE]

    proxys = schema.hybrid_pipeline(settings.rewrite.hybrid_weights)
    try:
        opensearch.transport.perform_request("PUT", path, body=proxys)  # as a proxy put it
        job_runner.prepare_stores(weighted, opensearch, neo4j_driver)
        assert installed() == proxys  # kept
        opensearch.transport.perform_request("DELETE", path)
        job_runner.prepare_stores(weighted, opensearch, neo4j_driver)
        assert installed() == schema.hybrid_pipeline((0.6, 0.4))  # missing: put
    finally:
        opensearch.transport.perform_request("DELETE", path)
        job_runner.prepare_stores(settings, opensearch, neo4j_driver)


def test_a_passed_through_body_is_bounded_by_the_engine_not_by_kgqr(
    settings: Settings, opensearch: Any, unique_name: str, movies_kb: str
) -> None:
    """KGQR_MAX_BODY_BYTES bounds the bodies kgqr reads (searches); a `_bulk` over it was
    kgqr's 413 where the engine (and the front) took it. Other bodies now stream through."""
    small = settings.replaced({"max_body_bytes": 2000})
    lines = [
        line
        for i in range(10)
        for line in (json.dumps({"index": {"_index": unique_name, "_id": str(i)}}),
                     json.dumps({"text": "x" * 500}))
    ]  # fmt: skip
    bulk = ("\n".join(lines) + "\n").encode()
    assert len(bulk) > 5000
    try:
        with running_proxy(small) as url:
            written = httpx.post(f"{url}/_bulk?refresh=true", content=bulk,
                                 headers={"content-type": "application/x-ndjson"})  # fmt: skip
            search = {"query": {"match": {"text": "x " * 1500}}}
            refused = httpx.post(f"{url}/{movies_kb}/_search", json=search)
        assert written.status_code == 200 and written.json()["errors"] is False
        assert opensearch.count(index=unique_name)["count"] == 10
        assert refused.status_code == 413  # a body kgqr reads keeps its bound
    finally:
        opensearch.indices.delete(index=unique_name, ignore_unavailable=True)


def test_the_front_appends_the_callers_address_to_x_forwarded_for(settings: Settings) -> None:
    """What kgqr and the engine see of where a request came from: the front adds the
    connecting address to what the caller sent, as a reverse proxy does."""
    import http.server
    import threading

    seen: list[str | None] = []

    class Echo(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.headers.get("x-forwarded-for"))
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: Any) -> None:
            return

    stand_in = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)  # kgqr's place
    threading.Thread(target=stand_in.serve_forever, daemon=True).start()
    try:
        kgqr_port = stand_in.server_address[1]
        with running_front(settings, "127.0.0.1", free_port(), kgqr_port) as front:
            path = f"{front}/{schema.documents_index('xff')}/_search"  # routed to kgqr
            httpx.post(path, json={})
            httpx.post(path, json={}, headers={"x-forwarded-for": "10.9.8.7"})
    finally:
        stand_in.shutdown()
    assert seen == ["127.0.0.1", "10.9.8.7, 127.0.0.1"]
