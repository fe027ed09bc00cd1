"""Passing requests to OpenSearch unchanged, and answers back unchanged."""

from __future__ import annotations

import httpx
from starlette.requests import Request
from starlette.responses import Response

# Hop-by-hop headers (RFC 9110 7.6.1) and ones httpx recomputes must not be copied.
DROPPED_REQUEST_HEADERS = {
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "accept-encoding",
}
DROPPED_RESPONSE_HEADERS = {
    "content-length",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-encoding",
}


def request_headers(request: Request) -> dict[str, str]:
    return {k: v for k, v in request.headers.items() if k.lower() not in DROPPED_REQUEST_HEADERS}


def to_response(upstream: httpx.Response, content: bytes | None = None) -> Response:
    headers = {
        k: v for k, v in upstream.headers.items() if k.lower() not in DROPPED_RESPONSE_HEADERS
    }
    return Response(
        content=upstream.content if content is None else content,
        status_code=upstream.status_code,
        headers=headers,
    )


async def forward(client: httpx.AsyncClient, request: Request, body: bytes) -> Response:
    """The request as the client sent it (method, path, query, headers, body)."""
    upstream = await client.request(
        request.method,
        request.url.path,
        params=request.url.query or None,
        headers=request_headers(request),
        content=body or None,
    )
    return to_response(upstream)
