"""The proxy's LLM client against a scripted streaming endpoint on a loopback socket: it
assembles streamed answers, refuses truncated ones, and hangs up when its caller gives up
(so a real llama.cpp server stops generating an answer nobody waits for)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from kgqr_core.llm import AsyncLlmClient, LlmClient, LlmRequest, LlmStreamInterrupted
from kgqr_core.settings import Settings


@dataclass
class ScriptedStream:
    """Answers every chat completion with `pieces`, one SSE chunk every `gap_s` seconds,
    the last with finish_reason "stop" unless `finish` is False; records what it sent and
    whether the client hung up before the end."""

    pieces: list[str]
    gap_s: float = 0.0
    finish: bool = True
    sent: int = 0
    hung_up: asyncio.Event = field(default_factory=asyncio.Event)

    def _chunk(self, index: int) -> bytes:
        last = index == len(self.pieces) - 1
        choice = {
            "index": 0,
            "delta": {"content": self.pieces[index]},
            "finish_reason": "stop" if last and self.finish else None,
        }
        body = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
                "choices": [choice]}  # fmt: skip
        return f"data: {json.dumps(body)}\n\n".encode()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )  # fmt: skip
        assert json.loads(await reader.readexactly(length))["stream"] is True
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"connection: close\r\n\r\n")  # fmt: skip
        try:
            for index in range(len(self.pieces)):
                await asyncio.sleep(self.gap_s)
                if await _closed(reader):
                    raise ConnectionResetError
                writer.write(self._chunk(index))
                await writer.drain()
                self.sent += 1
            writer.write(b"data: [DONE]\n\n")
            await writer.drain()
        except ConnectionError:
            self.hung_up.set()
        finally:
            writer.close()


async def _closed(reader: asyncio.StreamReader) -> bool:
    """Whether the peer has closed its side (it sends nothing more after its request)."""
    try:
        await asyncio.wait_for(reader.read(1), timeout=0.001)
    except TimeoutError:
        return False
    return reader.at_eof()


@asynccontextmanager
async def settings_for(endpoint: ScriptedStream) -> AsyncIterator[Settings]:
    server = await asyncio.start_server(endpoint.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield Settings.of({"llm_base_url": f"http://127.0.0.1:{port}/v1", "llm_model": "m"})
    finally:
        server.close()


@asynccontextmanager
async def client_of(endpoint: ScriptedStream) -> AsyncIterator[AsyncLlmClient]:
    async with settings_for(endpoint) as settings:
        client = AsyncLlmClient(settings)
        try:
            yield client
        finally:
            await client.close()


def test_streamed_pieces_make_one_answer() -> None:
    async def run() -> list[str]:
        async with client_of(ScriptedStream(['{"a": ', '"b"', "}"])) as client:
            return (await client.complete(LlmRequest.user("q", json_mode=True))).texts

    assert asyncio.run(run()) == ['{"a": "b"}']


def test_the_blocking_client_streams_the_same_answer() -> None:
    async def run() -> list[str]:
        async with settings_for(ScriptedStream(['{"a": ', '"b"', "}"])) as settings:
            client = LlmClient(settings)
            answer = await asyncio.to_thread(client.complete, LlmRequest.user("q"))
            return answer.texts

    assert asyncio.run(run()) == ['{"a": "b"}']


def test_a_stream_cut_short_is_an_error_not_an_answer() -> None:
    async def run() -> None:
        async with client_of(ScriptedStream(['{"a": ', '"b'], finish=False)) as client:
            await client.complete(LlmRequest.user("q"))

    with pytest.raises(LlmStreamInterrupted):
        asyncio.run(run())


def test_a_caller_giving_up_hangs_up_on_the_endpoint() -> None:
    endpoint = ScriptedStream(["token "] * 200, gap_s=0.02)

    async def run() -> None:
        async with client_of(endpoint) as client:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(client.complete(LlmRequest.user("q")), timeout=0.3)
            await asyncio.wait_for(endpoint.hung_up.wait(), timeout=5)

    asyncio.run(run())
    assert 0 < endpoint.sent < 200


def test_an_answer_cache_that_is_down_costs_the_cache_not_the_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Redis outage made every LLM call raise, and every LLM rewrite fall back to the
    plain query, though the LLM was up: the cache only saves time. It is said once a
    minute (each call's read and write said it, two lines an LLM call)."""
    import redis
    import redis.asyncio as aioredis

    from kgqr_ops.background_proxy import free_port

    nowhere = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there

    async def run() -> tuple[list[str], list[str]]:
        async with settings_for(ScriptedStream(['{"a": ', '"b"', "}"])) as settings:
            down = aioredis.Redis.from_url(nowhere)
            client = AsyncLlmClient(settings, down)
            try:
                proxied = (await client.complete(LlmRequest.user("q"))).texts
            finally:
                await client.close()
                await down.aclose()
        async with settings_for(ScriptedStream(['{"a": ', '"b"', "}"])) as settings:
            blocking = LlmClient(settings, redis.Redis.from_url(nowhere))
            answer = await asyncio.to_thread(blocking.complete, LlmRequest.user("q"))
        return proxied, answer.texts

    with caplog.at_level("WARNING", logger="kgqr.llm"):
        assert asyncio.run(run()) == (['{"a": "b"}'], ['{"a": "b"}'])
    told = [r for r in caplog.records if "answer cache unavailable" in r.getMessage()]
    assert len(told) == 2, told  # once for each client, not for each read and write
