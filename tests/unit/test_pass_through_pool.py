"""A pass-through that finds every connection to the engine busy."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from kgqr_core.cluster_nodes import ClusterNodes
from kgqr_core.settings import Settings
from query_rewriter.engine import forwarding

pytestmark = pytest.mark.unit


def test_a_full_pool_is_no_dead_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """Waiting past the pool's bound for a connection (callers trickling bodies through
    every one) marked a node that answers as down, and every client of kgqr's moved off
    it; the wait is bounded, and the node stays up."""
    monkeypatch.setattr(forwarding, "POOL_WAIT_S", 0.5)
    monkeypatch.setattr(forwarding, "CONNECT_S", 0.1)

    async def run() -> None:
        held = asyncio.Event()

        async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            held.set()
            await asyncio.sleep(30)
            writer.close()

        server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        nodes = ClusterNodes([url])
        upstream = forwarding.Upstream(Settings.of({"opensearch_url": url}), nodes, connections=1)
        try:
            holding = asyncio.create_task(upstream.send("GET", "/", "", [], b""))
            await asyncio.wait_for(held.wait(), 10)
            with pytest.raises(httpx.TransportError, match="no connection to OpenSearch free"):
                await asyncio.wait_for(upstream.send("GET", "/", "", [], b""), 10)
            assert nodes.in_order() == [url]  # not taken for down
            holding.cancel()
        finally:
            await upstream.close()
            server.close()

    asyncio.run(run())
