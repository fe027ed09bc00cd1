"""The one seam between kgqr and OpenSearch. Every request kgqr makes for a caller leaves
through an `EngineSession`, which sends the caller's own headers and nothing of kgqr's; kgqr's
own account (`Engine.service`) serves its bookkeeping only; requests kgqr does not read are
forwarded verbatim (`Engine.forward`). Credentials, timeouts and transport errors are
handled here once (tests/integration/test_engine_seam.py counts every request)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport
from starlette.requests import Request
from starlette.responses import Response

from kgqr_core.cluster_nodes import ClusterNodes, reported_urls
from kgqr_core.connections import opensearch_basic_auth, opensearch_ssl_context
from kgqr_core.settings import Settings
from query_rewriter.engine import json_codec
from query_rewriter.engine.caller import Caller
from query_rewriter.engine.failover import FailoverTransport
from query_rewriter.engine.forwarding import Upstream

log = logging.getLogger("kgqr.proxy")
KEEPALIVE_S = 5.0  # httpx's default, which the transport applied before it took a session


def opensearch_http_client(
    settings: Settings, *, service_account: bool = False, nodes: ClusterNodes | None = None
) -> httpx.AsyncClient:
    """A pooled client for OpenSearch. Without `service_account` it carries no credentials
    of its own: every request made for a caller sends the caller's headers, and a client
    default would replace them (httpx's `auth` overrides an Authorization header). With it,
    kgqr's own account (Engine.as_kgqr says for what).
    Requests go to the first node of `nodes` that takes them (failover.py)."""
    limits = httpx.Limits(
        max_connections=200, max_keepalive_connections=50, keepalive_expiry=KEEPALIVE_S
    )
    tls = opensearch_ssl_context(settings)

    def session() -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=limits.max_connections or 0, keepalive_timeout=KEEPALIVE_S, ssl=tls
        )
        return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())

    return httpx.AsyncClient(
        base_url=settings.opensearch.url,
        auth=opensearch_basic_auth(settings) if service_account else None,
        timeout=httpx.Timeout(60.0, connect=5.0),
        limits=limits,
        transport=FailoverTransport(
            AiohttpTransport(limits=limits, client=session), nodes or ClusterNodes.of(settings)
        ),
        headers={"accept-encoding": "identity"},
        cookies=_no_cookies(),
    )


def _no_cookies() -> CookieJar:
    """A jar that keeps nothing. The client is shared by every caller: a session cookie
    an auth gateway set on one caller's answer was sent with the next callers' identity
    lookups and searches (both httpx and the aiohttp session under it keep cookies by
    default). A caller's own Cookie header still goes with their requests."""
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


@dataclass
class Engine:
    """OpenSearch as the proxy reaches it: `caller_http` carries no credentials of its own
    (only `as_caller` sends on it), `service` is kgqr's account, `upstream` the verbatim
    pass-through pool."""

    settings: Settings
    caller_http: httpx.AsyncClient
    service: httpx.AsyncClient
    upstream: Upstream
    nodes: ClusterNodes

    @classmethod
    def connect(cls, settings: Settings) -> Engine:
        """Every path to the engine shares one view of which nodes answer."""
        nodes = ClusterNodes.of(settings)
        return cls(
            settings,
            opensearch_http_client(settings, nodes=nodes),
            opensearch_http_client(settings, service_account=True, nodes=nodes),
            Upstream(settings, nodes),
            nodes,
        )

    async def learn_nodes(self) -> list[str]:
        """Add the nodes the engine reports (`_nodes/http`, as kgqr's account): a cluster
        that grew needs no change of kgqr's settings. Nothing learnt when the account may
        not ask."""
        scheme = ClusterNodes.address(self.settings.opensearch.url)[0]
        try:
            answer = await self.as_kgqr().send("GET", "/_nodes/http")
            answer.raise_for_status()
        except httpx.HTTPError as exc:
            log.info("cluster nodes not read: %s", exc)
            return self.nodes.urls
        self.nodes.learn(reported_urls(answer.json(), scheme))
        return self.nodes.urls

    def as_caller(self, caller: Caller, headers: Mapping[str, str] | None = None) -> EngineSession:
        """Requests for `caller`: their credential headers, over the request `headers`
        kgqr passes on (tracing ids, the forwarded-for chain), and nothing else."""
        return EngineSession(self.caller_http, {**(headers or {}), **caller.headers})

    def as_kgqr(self) -> EngineSession:
        """kgqr's own account: its bookkeeping indices and definitions, and what kgqr
        derived from the documents (the graph's copy, side vectors, triples), each used for
        a caller only where the caller's own read of its source succeeds; never a search
        of a caller's."""
        return EngineSession(self.service, {})

    def for_request(self, headers: Mapping[str, str]) -> EngineSession:
        """Requests for whoever sent `headers` (forwarding.request_headers)."""
        return self.as_caller(Caller.from_headers(headers, self.settings), headers)

    async def forward(
        self, request: Request, body: bytes | None = None, decoded: bool = False
    ) -> Response:
        """The caller's request as they sent it (forwarding.Upstream.forward)."""
        return await self.upstream.forward(request, body, decoded)

    async def close(self) -> None:
        await self.upstream.close()
        await self.caller_http.aclose()
        await self.service.aclose()


class EngineSession:
    """Requests sent as one principal: a caller, with their headers only (a caller never
    sees through kgqr what they could not see directly), or kgqr's own account."""

    def __init__(self, client: httpx.AsyncClient, headers: Mapping[str, str]) -> None:
        self._client = client
        self.headers = dict(headers)

    async def send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, str] | None = None,
        content: bytes | None = None,
        content_type: str | None = None,
    ) -> httpx.Response:
        """The engine's answer as it came (any status); transport errors raise. A `json`
        body is written with orjson: a search's k-NN clause holds the query's vector, and
        the standard library's writing of it was a third of a millisecond a search."""
        headers = self.headers
        if json is not None:
            # The caller's content type, as httpx kept it: the engine refuses a search sent
            # as text/plain directly, so it must through kgqr too.
            given = content_type or next(
                (v for k, v in headers.items() if k.lower() == "content-type"), None
            )
            content, content_type = json_codec.dumps(json), given or "application/json"
        if content_type is not None:
            headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
            headers["content-type"] = content_type
        return await self._client.request(
            method, path, params=params or {}, content=content, headers=headers
        )

    async def search_answer(
        self, index: str, body: dict[str, Any], params: Mapping[str, str] | None = None
    ) -> httpx.Response:
        """A search as the engine answers it, whatever the status."""
        return await self.send("POST", f"/{index}/_search", json=body, params=params)

    async def search(
        self, index: str, body: dict[str, Any], params: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """A search whose answer kgqr reads: an error status raises."""
        response = await self.search_answer(index, body, params)
        response.raise_for_status()
        return dict(response.json())

    async def msearch(self, index: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Several searches of one index in one round trip; a failed one raises, like search."""
        lines = []
        for body in bodies:
            lines += ["{}", json.dumps(body)]
        response = await self.send(
            "POST",
            f"/{index}/_msearch",
            content=("\n".join(lines) + "\n").encode(),
            content_type="application/x-ndjson",
        )
        response.raise_for_status()
        answers = list(response.json()["responses"])
        for answer in answers:
            if "error" in answer:
                raise httpx.HTTPStatusError(
                    f"msearch item failed: {answer['error']}",
                    request=response.request,
                    response=response,
                )
        return answers
