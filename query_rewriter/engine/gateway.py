"""The proxy's one connection to OpenSearch (httpx, async): forwarding and its own searches."""

from __future__ import annotations

import json
from collections.abc import Mapping
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from kgqr_core.connections import opensearch_basic_auth, opensearch_ssl_context
from kgqr_core.settings import Settings

KEEPALIVE_S = 5.0  # httpx's default, which the transport applied before it took a session


def opensearch_http_client(
    settings: Settings, *, service_account: bool = False
) -> httpx.AsyncClient:
    """A pooled client for OpenSearch. Without `service_account` it carries no credentials
    of its own: every request made for a caller sends the caller's headers, and a client
    default would replace them (httpx's `auth` overrides an Authorization header). With it,
    kgqr's own account, for kgqr's bookkeeping (KB meta, query log, its definitions) only."""
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
        base_url=settings.opensearch_url,
        auth=opensearch_basic_auth(settings) if service_account else None,
        timeout=httpx.Timeout(60.0, connect=5.0),
        limits=limits,
        transport=AiohttpTransport(limits=limits, client=session),
        headers={"accept-encoding": "identity"},
        cookies=_no_cookies(),
    )


def _no_cookies() -> CookieJar:
    """A jar that keeps nothing. The client is shared by every caller: a session cookie
    an auth gateway set on one caller's answer was sent with the next callers' identity
    lookups and searches (both httpx and the aiohttp session under it keep cookies by
    default). A caller's own Cookie header still goes with their requests."""
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


class OpenSearchGateway:
    """Searches kgqr itself runs (initial hits for PRF/RAR, entity lookups, DRF), sent with
    the caller's own credential headers so a caller never sees documents it could not
    search; `client` must be the credential-less one."""

    def __init__(self, client: httpx.AsyncClient, credentials: Mapping[str, str] | None) -> None:
        self._client = client
        self._headers = dict(credentials or {})

    async def search(
        self, index: str, body: dict[str, Any], params: dict[str, str] | None = None
    ) -> dict[str, Any]:
        response = await self._client.post(
            f"/{index}/_search", json=body, params=params or {}, headers=self._headers
        )
        response.raise_for_status()
        return dict(response.json())

    async def msearch(self, index: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Several searches of one index in one round trip; a failed one raises, like search."""
        lines = []
        for body in bodies:
            lines += ["{}", json.dumps(body)]
        response = await self._client.post(
            f"/{index}/_msearch",
            content=("\n".join(lines) + "\n").encode(),
            headers={**self._headers, "content-type": "application/x-ndjson"},
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
