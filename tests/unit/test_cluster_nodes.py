"""Failing over between the cluster's nodes: a refused connection goes to the next node
for any request, a dying node's 5xx only for a search, and the node is tried last a while."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from kgqr_core.cluster_nodes import ClusterNodes, configured_urls, is_search, reported_urls
from kgqr_core.settings import Settings
from query_rewriter.engine.failover import FailoverTransport

NODES = ["http://n1:9200", "http://n2:9200", "http://n3:9200"]


def _client(answer: dict[str, object], seen: list[str]) -> httpx.AsyncClient:
    """Node -> what it does: "refuse", or a status code."""

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.host}")
        behaviour = answer[request.url.host]
        if behaviour == "refuse":
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(int(str(behaviour)), json={"node": request.url.host})

    transport = FailoverTransport(httpx.MockTransport(handle), ClusterNodes(NODES))
    return httpx.AsyncClient(base_url=NODES[0], transport=transport)


def test_a_refused_connection_goes_to_the_next_node_for_any_request() -> None:
    seen: list[str] = []

    async def run() -> list[int]:
        async with _client({"n1": "refuse", "n2": 200, "n3": 200}, seen) as client:
            write = await client.put("/index/_doc/1", json={"a": 1})
            again = await client.post("/index/_search", json={})
            return [write.status_code, again.status_code]

    assert asyncio.run(run()) == [200, 200]
    # n1 refused once, and is tried last for the next request.
    assert seen == ["PUT n1", "PUT n2", "POST n2"]


def test_a_dying_nodes_5xx_sends_only_a_search_on() -> None:
    seen: list[str] = []

    async def run() -> list[int]:
        async with _client({"n1": 503, "n2": 200, "n3": 200}, seen) as client:
            write = await client.post("/index/_doc", json={"a": 1})
            search = await client.post("/index/_search", json={})
            return [write.status_code, search.status_code]

    assert asyncio.run(run()) == [503, 200]
    assert seen == ["POST n1", "POST n1", "POST n2"]


def test_every_node_refusing_is_the_connection_error() -> None:
    async def run() -> None:
        async with _client({"n1": "refuse", "n2": "refuse", "n3": "refuse"}, []) as client:
            await client.get("/")

    with pytest.raises(httpx.ConnectError):
        asyncio.run(run())


def test_nodes_come_from_the_settings_and_the_engines_report() -> None:
    settings = Settings.of({"opensearch_url": "http://n1:9200/",
                            "opensearch_other_urls": "http://n2:9200, http://n1:9200"})  # fmt: skip
    assert configured_urls(settings) == ["http://n1:9200", "http://n2:9200"]
    report = {"nodes": {"a": {"http": {"publish_address": "search-3/10.0.0.3:9200"}},
                        "b": {"http": {"publish_address": "10.0.0.4:9200"}}, "c": {}}}  # fmt: skip
    assert reported_urls(report, "https") == ["https://10.0.0.3:9200", "https://10.0.0.4:9200"]
    nodes = ClusterNodes(configured_urls(settings))
    nodes.learn(["http://n2:9200", "http://n3:9200"])
    assert nodes.urls == ["http://n1:9200", "http://n2:9200", "http://n3:9200"]
    assert is_search("POST", "/a/_search") and is_search("GET", "/a/_doc/1")
    assert not is_search("POST", "/a/_doc") and not is_search("POST", "/_bulk")


def test_a_write_on_a_connection_the_node_dropped_is_not_sent_again() -> None:
    """httpx-aiohttp reports a dropped connection as ConnectTimeout: its cause tells a
    request that never left from one a node may have acted on."""
    import aiohttp

    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.host}")
        if request.url.host == "n1":
            raise httpx.ConnectTimeout("dropped") from aiohttp.ServerDisconnectedError()
        return httpx.Response(200)

    transport = FailoverTransport(httpx.MockTransport(handle), ClusterNodes(NODES))

    async def run() -> int:
        async with httpx.AsyncClient(base_url=NODES[0], transport=transport) as client:
            with pytest.raises(httpx.ConnectTimeout):
                await client.post("/index/_doc", json={"a": 1})
            return (await client.post("/index/_search", json={})).status_code

    assert asyncio.run(run()) == 200
    assert seen == ["POST n1", "POST n1", "POST n2"]  # the write once; the search again
    assert not is_search("GET", "/_search/scroll") and not is_search("POST", "/_search/scroll")
