"""Fixtures shared by the proxy's integration tests: a small managed knowledge base, and the
two ways clients reach kgqr (`kgqr serve` itself and the nginx front)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kgqr_core.settings import Settings
from kgqr_ops.background_proxy import free_port, running_proxy
from kgqr_ops.nginx_front import running_front
from kgqr_ops.services.local_service import port_of
from plugin import schema
from tests.integration.ingest_helpers import TINY_KB, ingested


@pytest.fixture(scope="module")
def movies_kb(settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any,
              ingest_worker: Any) -> Iterator[str]:  # fmt: skip
    with ingested(settings, opensearch, neo4j_driver, redis_client, TINY_KB, "proxy-movies") as kb:
        yield schema.documents_index(kb)


@pytest.fixture(scope="module")
def proxy_url(settings: Settings) -> Iterator[str]:
    with running_proxy(settings) as url:
        yield url


@pytest.fixture(scope="module", params=["kgqr", "front"])
def entry_url(request: pytest.FixtureRequest, settings: Settings, proxy_url: str) -> Iterator[str]:
    """Where clients point: `kgqr serve` itself, or the nginx front that passes what kgqr
    does not rewrite straight to OpenSearch. Both must look the same to a client."""
    if request.param == "kgqr":
        yield proxy_url
        return
    with running_front(settings, "127.0.0.1", free_port(), port_of(proxy_url, 0)) as url:
        yield url
