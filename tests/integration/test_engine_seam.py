"""Every request kgqr makes for a caller leaves through the engine seam (engine/gateway.py),
and every hybrid body it sends was built by `hybrid_body` (engine/hybrid_query.py).

The proxy runs against the real engine with two recorders: one in `EngineSession.send`,
the seam, and one on the wire of the credential-less client every caller's request uses.
A request that reached that client past the seam (a module posting on it directly, as four
did before the seam existed) is on the wire and not at the seam; a hybrid body written by
hand somewhere else is at the seam and not among `hybrid_body`'s."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import httpx
import pytest

from kgqr_core.settings import Settings
from kgqr_ops.background_proxy import running_proxy
from query_rewriter.engine import gateway, hybrid_query
from query_rewriter.engine.gateway import EngineSession

pytestmark = [pytest.mark.integration, pytest.mark.quick]


class Recorders:
    def __init__(self) -> None:
        self.seam: Counter[tuple[str, str]] = Counter()
        self.wire: Counter[tuple[str, str]] = Counter()
        self.service_paths: list[str] = []
        self.caller_clients: set[int] = set()
        self.seam_hybrids: list[str] = []
        self.built_hybrids: set[str] = set()


def _hybrid_query(body: Any) -> str | None:
    query = body.get("query") if isinstance(body, dict) else None
    if isinstance(query, dict) and "hybrid" in query:
        return json.dumps(query, sort_keys=True)
    return None


@pytest.fixture
def recorders(monkeypatch: pytest.MonkeyPatch) -> Recorders:
    seen = Recorders()
    send = EngineSession.send

    async def recorded_send(self: EngineSession, method: str, path: str, **kwargs: Any) -> Any:
        if id(self._client) not in seen.caller_clients:  # kgqr's own account (as_kgqr)
            return await send(self, method, path, **kwargs)
        seen.seam[(method, path)] += 1
        if (hybrid := _hybrid_query(kwargs.get("json"))) is not None:
            seen.seam_hybrids.append(hybrid)
        return await send(self, method, path, **kwargs)

    monkeypatch.setattr(EngineSession, "send", recorded_send)
    client = gateway.opensearch_http_client

    def watched_client(
        settings: Settings, *, service_account: bool = False, nodes: Any = None
    ) -> httpx.AsyncClient:
        made = client(settings, service_account=service_account, nodes=nodes)
        if not service_account:
            seen.caller_clients.add(id(made))

        async def on_the_wire(request: httpx.Request) -> None:
            if service_account:
                seen.service_paths.append(request.url.path)
            else:
                seen.wire[(request.method, request.url.path)] += 1

        made.event_hooks["request"].append(on_the_wire)
        return made

    monkeypatch.setattr(gateway, "opensearch_http_client", watched_client)
    highlighted = hybrid_query._highlighting_the_callers_query

    def built(body: dict[str, Any], query: Any) -> dict[str, Any]:
        body = highlighted(body, query)
        seen.built_hybrids.add(str(_hybrid_query(body)))
        return body

    monkeypatch.setattr(hybrid_query, "_highlighting_the_callers_query", built)
    return seen


def test_every_request_for_a_caller_and_every_hybrid_body_come_through_the_one_seam(
    settings: Settings, movies_kb: str, recorders: Recorders
) -> None:
    query = {"query": {"match": {"text": "films with Al Pacino"}}, "size": 3}
    with running_proxy(settings) as url, httpx.Client(base_url=url, timeout=120) as client:
        searches = [
            ("base", {**query, "aggs": {"types": {"terms": {"field": "type"}}}}),
            ("graph", query),
            ("graph_walk", query),
            ("graph&kgqr.param.fusion.plain=1", query),  # base's ranking fused in
            ("graph&kgqr.param.hybrid.bm25=0.2", query),  # the request's own weights
        ]
        for strategy, body in searches:
            answer = client.post(
                f"/{movies_kb}/_search?kgqr.strategy={strategy}&kgqr.explain=true", json=body
            )
            assert answer.status_code == 200, answer.text
            assert answer.json()["kgqr"].get("fallback") is None, answer.json()["kgqr"]
        lines = [{"index": movies_kb}, query, {"index": "kgqr-meta"}, {"size": 0}]
        msearch = client.post(
            "/_msearch?kgqr.strategy=graph",
            content="".join(json.dumps(line) + "\n" for line in lines),
            headers={"content-type": "application/x-ndjson"},
        )
        assert msearch.status_code == 200, msearch.text
        template = {"source": {"query": {"match": {"text": "{{q}}"}}}, "params": {"q": "Heat"}}
        rendered = client.post(f"/{movies_kb}/_search/template?kgqr.strategy=graph", json=template)
        assert rendered.status_code == 200, rendered.text
    assert sum(recorders.wire.values()) >= 20  # searches, facets, strategies' reads, render
    assert recorders.wire == recorders.seam
    assert ("POST", "/_render/template") in recorders.seam
    assert len(recorders.seam_hybrids) >= 8
    assert set(recorders.seam_hybrids) <= recorders.built_hybrids
    # kgqr's own account touched its bookkeeping only, never a knowledge base's documents.
    assert recorders.service_paths and not any(
        "-documents" in path for path in recorders.service_paths
    ), recorders.service_paths
