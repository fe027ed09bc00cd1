"""An httpx transport that sends each request to the first cluster node that takes it
(kgqr_core/cluster_nodes.py): the request's URL names the configured node, and is
re-addressed to whichever node the order puts first."""

from __future__ import annotations

import aiohttp
import httpx

from kgqr_core.cluster_nodes import RETRIED_STATUSES, ClusterNodes, is_search

# What a broken connection to a node that died raises, whatever the transport: a search
# is sent again after one of these, anything else only when nothing was sent.
BROKEN = (httpx.ConnectError, httpx.ConnectTimeout, httpx.ReadError, httpx.WriteError,
          httpx.RemoteProtocolError)  # fmt: skip


def nothing_sent(exc: httpx.TransportError) -> bool:
    """Whether the request never left: the connection was refused or not made in time.
    httpx-aiohttp maps every aiohttp connection error to ConnectTimeout, a server that
    dropped a connection mid-request included, so its cause decides."""
    cause = exc.__cause__
    if isinstance(cause, aiohttp.ClientError):
        return isinstance(cause, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError)
    return isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)


class FailoverTransport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport, nodes: ClusterNodes) -> None:
        self._inner = inner
        self._nodes = nodes

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        order = self._nodes.in_order()
        # A 5xx or a broken connection is retried only for a search whose body can be
        # sent again.
        search = is_search(request.method, request.url.path) and isinstance(
            request.stream, httpx.ByteStream
        )
        for number, url in enumerate(order):
            last = number == len(order) - 1
            scheme, host, port = ClusterNodes.address(url)
            request.url = request.url.copy_with(scheme=scheme, host=host, port=port)
            request.headers["host"] = f"{host}:{port}"
            try:
                response = await self._inner.handle_async_request(request)
            except BROKEN as exc:
                if last or not (nothing_sent(exc) or search):
                    raise
                self._nodes.failed(url)
                continue
            if search and response.status_code in RETRIED_STATUSES and not last:
                await response.aclose()
                self._nodes.failed(url)
                continue
            self._nodes.worked(url)
            return response
        raise AssertionError("unreachable: the last node answers or raises")

    async def aclose(self) -> None:
        await self._inner.aclose()
