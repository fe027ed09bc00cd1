"""Passing requests to OpenSearch unchanged, and answers back unchanged.

Verbatim traffic goes through `Upstream`, a bare aiohttp session, rather than the httpx
client kgqr uses for its own searches: pass-through is most of a proxy's traffic, and
httpx's request building (URL merging, cookies, decoding) cost about as much as a small
search itself (bench/proxy_latency.py). Bodies travel as bytes both ways (a request body
kgqr does not read streams through as it arrives), compressed answers stay compressed,
and nothing is re-encoded.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import aiohttp
import httpx
from multidict import CIMultiDict
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from yarl import URL

from kgqr_core.cluster_nodes import RETRIED_STATUSES, ClusterNodes, is_search
from kgqr_core.connections import opensearch_ssl_context
from kgqr_core.settings import Settings
from query_rewriter.engine import json_codec
from query_rewriter.engine.caller import Caller
from query_rewriter.engine.http_headers import HOP_BY_HOP

# Hop-by-hop headers and ones the HTTP client recomputes must not be copied.
# kgqr's own searches send JSON it encoded itself, so the caller's body encoding is dropped.
DROPPED_REQUEST_HEADERS = HOP_BY_HOP | {
    "host",
    "content-length",
    "accept-encoding",
    "content-encoding",
}
DROPPED_VERBATIM_REQUEST_HEADERS = HOP_BY_HOP | {"host", "content-length"}
# httpx hands kgqr decoded bodies, so their encoding and length no longer apply.
DROPPED_DECODED_RESPONSE_HEADERS = HOP_BY_HOP | {"content-length", "content-encoding"}
DROPPED_VERBATIM_RESPONSE_HEADERS = HOP_BY_HOP | {"content-length"}


def about_the_request(*answers: httpx.Response) -> dict[str, str]:
    """The headers of the engine's answers that are about the caller's request rather than
    its body: `Warning` (deprecations), CORS's `Access-Control-*` and the `Vary: origin`
    that keeps a shared cache from giving one site's answer to another. An answer kgqr
    writes itself carries them as the engine's would. From several answers (a rewritten
    search's hybrid and totals requests, an msearch's items) each value comes once: a
    deprecated aggregation warns only on the totals request, the only one aggregating."""
    values: dict[str, list[str]] = {}
    for answer in answers:
        for name, value in answer.headers.multi_items():
            name = name.lower()
            if name in ("warning", "vary") or name.startswith("access-control-"):
                found = values.setdefault(name, [])
                if value not in found:
                    found.append(value)
    return {name: ", ".join(found) for name, found in values.items()}


# Where json_answer keeps the content it wrote: each hit's whole `_source` makes a
# rewritten answer large, and a later step (the explain, the query log) need not read it
# back from its bytes.
_WRITTEN_CONTENT = "kgqr.content"


def json_answer(content: dict[str, Any], *answers: httpx.Response) -> httpx.Response:
    """An answer kgqr wrote from the engine's `answers` (the first gives the status), with
    their headers about the request."""
    headers = {**about_the_request(*answers), "content-type": "application/json"}
    body = json_codec.dumps(content)
    return httpx.Response(
        answers[0].status_code,
        content=body,
        headers=headers,
        extensions={_WRITTEN_CONTENT: content},
    )


def answer_content(answer: httpx.Response) -> Any:
    """An answer's JSON: what json_answer wrote it from (not to be changed: copy it), else
    read from its bytes (ValueError when it is not JSON kgqr can write back)."""
    if _WRITTEN_CONTENT in answer.extensions:
        return answer.extensions[_WRITTEN_CONTENT]
    return json_codec.loads(answer.content)


def bytes_to_read(answer: httpx.Response) -> int:
    """What answer_content reads of `answer`: none where kgqr wrote it (its content is at
    hand), else its bytes. What decides whether reading it goes off the event loop."""
    return 0 if _WRITTEN_CONTENT in answer.extensions else len(answer.content)


def request_headers(request: Request) -> dict[str, str]:
    """The caller's headers for a search kgqr sends itself (httpx, decoded answers)."""
    kept = {k: v for k, v in request.headers.items() if k.lower() not in DROPPED_REQUEST_HEADERS}
    return {**kept, **forwarded_for(request)}


def forwarded_for(request: Request) -> dict[str, str]:
    """X-Forwarded-For with the address this request came from appended, as a reverse
    proxy writes it: the engine's TCP peer is kgqr, so an engine that trusts kgqr
    (xff.internalProxies) would otherwise take whatever address a client put there."""
    sent = [v for k, v in request.headers.items() if k.lower() == "x-forwarded-for"]
    peer = request.client.host if request.client else None
    chain = [*sent, peer] if peer else sent
    return {"x-forwarded-for": ", ".join(chain)} if chain else {}


def to_response(upstream: httpx.Response, content: bytes | None = None) -> Response:
    headers = {
        k: v
        for k, v in upstream.headers.items()
        if k.lower() not in DROPPED_DECODED_RESPONSE_HEADERS
    }
    return Response(
        content=upstream.content if content is None else content,
        status_code=upstream.status_code,
        headers=headers,
    )


CONNECT_S = 5.0  # to open a connection to a node
POOL_WAIT_S = 60.0  # for one of the pool's connections, the opening included


class Upstream:
    """One keep-alive connection pool to OpenSearch for verbatim forwarding."""

    def __init__(
        self, settings: Settings, nodes: ClusterNodes | None = None, connections: int = 200
    ) -> None:
        self._nodes = nodes or ClusterNodes.of(settings)
        self._settings = settings
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=connections, ssl=opensearch_ssl_context(settings)),
            # `connect` bounds the wait for one of the 200 connections, as httpx's pool
            # timeout does kgqr's own requests: unset, callers trickling bodies through
            # every connection held each other forward waiting without end.
            timeout=aiohttp.ClientTimeout(
                total=None, connect=POOL_WAIT_S, sock_connect=CONNECT_S, sock_read=60.0
            ),
            auto_decompress=False,
            # Only what the caller sent: no added Accept-Encoding or User-Agent.
            skip_auto_headers=("Accept-Encoding", "User-Agent"),
            cookie_jar=aiohttp.DummyCookieJar(),
        )

    async def send(
        self,
        method: str,
        path: str,
        query: str,
        headers: list[tuple[str, str]],
        body: bytes | AsyncIterator[bytes],
        length: str | None = None,
    ) -> Response:
        """Send as given (path and query already encoded) and answer with OpenSearch's
        status, headers and bytes. The caller's credentials are the only ones sent (see
        caller.Caller for the opt-in that lends anonymous callers kgqr's account). A
        streamed body keeps the caller's `length` when it declared one (else it is sent
        chunked)."""
        outgoing = CIMultiDict(
            (k, v) for k, v in headers if k.lower() not in DROPPED_VERBATIM_REQUEST_HEADERS
        )
        if length is not None and not isinstance(body, bytes):
            outgoing["content-length"] = length
        if self._settings.proxy.anonymous_uses_service_account:  # else only the caller's are sent
            for name, value in Caller.from_headers(outgoing, self._settings).credentials:
                outgoing.setdefault(name, value)
        order = self._nodes.in_order()
        retry_5xx = is_search(method, path) and isinstance(body, bytes)
        for number, base in enumerate(order):
            url = URL(f"{base}{path}{'?' + query if query else ''}", encoded=True)
            began = time.monotonic()
            try:
                async with self._session.request(
                    method, url, headers=outgoing, data=body or None, allow_redirects=False
                ) as upstream:
                    content = await upstream.read()
                    # A HEAD answer keeps the length a GET would have; others get their own.
                    dropped = HOP_BY_HOP if method == "HEAD" else DROPPED_VERBATIM_RESPONSE_HEADERS
                    kept = [
                        (k, v)
                        for k, v in upstream.raw_headers
                        if k.decode("latin-1").lower() not in dropped
                    ]
                    status = upstream.status
            except aiohttp.ClientError as exc:
                if isinstance(exc.__cause__, ClientDisconnect):  # the caller left mid-body
                    raise exc.__cause__ from None
                # Refused (nothing was sent), or a search on a connection its node dropped:
                # the next node. Anything else was the node's to answer.
                refused = aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError
                if isinstance(exc, aiohttp.ConnectionTimeoutError) and (
                    time.monotonic() - began > CONNECT_S
                ):  # every connection busy, not a node that did not answer: not its fault
                    raise httpx.TransportError("no connection to OpenSearch free") from exc
                again = isinstance(exc, refused) or (
                    retry_5xx
                    and isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError)
                )
                if again and number < len(order) - 1:
                    self._nodes.failed(base)
                    continue
                raise httpx.TransportError(str(exc) or type(exc).__name__) from exc
            except TimeoutError as exc:
                raise httpx.TransportError(str(exc) or type(exc).__name__) from exc
            if retry_5xx and status in RETRIED_STATUSES and number < len(order) - 1:
                self._nodes.failed(base)
                continue
            self._nodes.worked(base)
            break
        response = Response(content=content, status_code=status)
        if method != "HEAD":
            kept.append((b"content-length", str(len(content)).encode()))
        response.raw_headers = kept
        return response

    async def forward(
        self, request: Request, body: bytes | None = None, decoded: bool = False
    ) -> Response:
        """The request as the client sent it (method, path, query, headers, body), less
        kgqr's own `kgqr.*` parameters, which OpenSearch would reject. `body`: the one kgqr
        read, else the caller's streamed through unread. `decoded`: kgqr undid the body's
        Content-Encoding (request_body.decode_body), so it is not sent."""
        query = request.scope.get("query_string", b"").decode("latin-1")
        if "kgqr." in query:
            query = urlencode(
                [(k, v) for k, v in request.query_params.multi_items() if not k.startswith("kgqr.")]
            )
        headers = [
            (k, v)
            for k, v in request.headers.items()
            if (not decoded or k != "content-encoding") and k.lower() != "x-forwarded-for"
        ]
        headers.extend(forwarded_for(request).items())
        path = request.scope.get("raw_path", request.url.path.encode()).decode("latin-1")
        if body is not None:
            return await self.send(request.method, path, query, headers, body)
        length = request.headers.get("content-length")
        if length in (None, "0") and "transfer-encoding" not in request.headers:
            return await self.send(request.method, path, query, headers, b"")
        return await self.send(request.method, path, query, headers, request.stream(), length)

    async def close(self) -> None:
        await self._session.close()
