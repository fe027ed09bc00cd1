"""The proxy's clients to OpenSearch are shared by every caller, so they keep nothing one
caller's answer set: a session cookie an auth gateway in front of the engine sets for
caller A must never go out with caller B's requests."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from kgqr_core.settings import Settings
from query_rewriter.engine.gateway import opensearch_http_client

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("service_account", [False, True])
def test_a_cookie_set_on_one_callers_answer_is_never_sent_for_another(
    service_account: bool,
) -> None:
    received: list[str | None] = []

    async def gateway(request: web.Request) -> web.Response:
        received.append(request.headers.get("cookie"))
        answer = web.json_response({})
        answer.set_cookie("session", "for-" + request.headers.get("authorization", "nobody"))
        return answer

    async def run() -> None:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", gateway)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        client = opensearch_http_client(
            Settings.of({"opensearch_url": f"http://127.0.0.1:{port}"}),
            service_account=service_account,
        )
        try:
            await client.get("/_plugins/_security/authinfo", headers={"authorization": "A"})
            await client.post("/kb/_search", json={}, headers={"authorization": "B"})
            await client.post("/kb/_search", json={}, headers={"cookie": "own=1"})
        finally:
            await client.aclose()
            await runner.cleanup()

    asyncio.run(run())
    assert received == [None, None, "own=1"]  # B got no cookie of A's; a caller's own goes
