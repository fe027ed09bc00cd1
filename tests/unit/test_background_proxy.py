"""The in-process proxy `kgqr eval` and `tune auto` start: it waits as long as the proxy is
starting (a first start prepares the embedder for minutes), says so, and fails at once,
with a reason, when its startup fails."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from kgqr_core.settings import Settings
from kgqr_ops import background_proxy

pytestmark = pytest.mark.unit


def _app(startup_s: float, fails: bool = False) -> Any:
    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await asyncio.sleep(startup_s)
        if fails:
            raise RuntimeError("no embedder")
        yield

    async def hello(_: Any) -> PlainTextResponse:
        return PlainTextResponse("served")

    return Starlette(routes=[Route("/", hello)], lifespan=lifespan)


def test_a_slow_start_is_waited_for_and_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background_proxy, "create_served_app", lambda _: _app(1.0))
    monkeypatch.setattr(background_proxy, "SAY_AFTER_S", 0.2)
    monkeypatch.setattr(background_proxy, "START_S", 30.0)
    said: list[str] = []
    with background_proxy.running_proxy(Settings(), say=said.append) as url:
        assert httpx.get(url).text == "served"
    assert said == ["starting kgqr's proxy (a first start prepares the embedder: minutes)"]


def test_a_failed_startup_is_told_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background_proxy, "create_served_app", lambda _: _app(0, fails=True))
    failed = pytest.raises(background_proxy.ProxyDidNotStart, match="startup failed")
    with failed, background_proxy.running_proxy(Settings()):
        pytest.fail("served")
