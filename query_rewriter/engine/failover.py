"""An httpx transport that sends each request to the first cluster node that takes it
(kgqr_core/cluster_nodes.py): the request's URL names the configured node, and is
re-addressed to whichever node the order puts first."""

from __future__ import annotations

import httpx

from kgqr_core.cluster_nodes import RETRIED_STATUSES, ClusterNodes, is_search


class FailoverTransport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport, nodes: ClusterNodes) -> None:
        self._inner = inner
        self._nodes = nodes

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        order = self._nodes.in_order()
        # A 5xx or a broken connection is retried only for a search whose body can be
        # sent again.
        retry_5xx = is_search(request.method, request.url.path) and isinstance(
            request.stream, httpx.ByteStream
        )
        refused: Exception | None = None
        for number, url in enumerate(order):
            last = number == len(order) - 1
            scheme, host, port = ClusterNodes.address(url)
            request.url = request.url.copy_with(scheme=scheme, host=host, port=port)
            request.headers["host"] = f"{host}:{port}"
            try:
                response = await self._inner.handle_async_request(request)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # nothing was sent
                self._nodes.failed(url)
                refused = exc
                continue
            except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError) as exc:
                # A kept-alive connection to a node that died: a search is sent again.
                if not retry_5xx or last:
                    raise
                self._nodes.failed(url)
                refused = exc
                continue
            if retry_5xx and response.status_code in RETRIED_STATUSES and not last:
                await response.aclose()
                self._nodes.failed(url)
                continue
            self._nodes.worked(url)
            return response
        assert refused is not None
        raise refused

    async def aclose(self) -> None:
        await self._inner.aclose()
