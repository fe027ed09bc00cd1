"""kgqr appends the address a request came from to X-Forwarded-For, as a reverse proxy
does: the engine's peer is kgqr, so an engine that trusts kgqr would otherwise take any
address a client wrote there for the client's own."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from query_rewriter.engine.forwarding import request_headers

pytestmark = pytest.mark.unit


def _request(headers: list[tuple[bytes, bytes]]) -> Request:
    return Request(
        {
            "type": "http",
            "method": "POST",
            "path": "/kb/_search",
            "headers": headers,
            "client": ("10.1.2.3", 51000),
            "query_string": b"",
        }
    )


def test_kgqr_appends_the_peer_to_what_the_client_wrote() -> None:
    forged = _request([(b"x-forwarded-for", b"1.1.1.1"), (b"authorization", b"Basic x")])
    assert request_headers(forged)["x-forwarded-for"] == "1.1.1.1, 10.1.2.3"
    assert request_headers(_request([]))["x-forwarded-for"] == "10.1.2.3"
