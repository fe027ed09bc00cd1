"""The proxy's LLM client against the real local llama.cpp server: requests that overlap
both get whole answers, and an answer the caller gives up on stops being generated."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from kgqr_core.layout import ServiceLayout
from kgqr_core.llm import AsyncLlmClient, LlmRequest
from kgqr_core.settings import Settings

# llama-cpp-python prints this when it drops a streamed answer whose client hung up.
DROPPED = "Disconnected from client"


async def _answers_of_overlapping_requests(settings: Settings) -> list[list[str]]:
    client = AsyncLlmClient(settings)  # no cache: both must reach the server
    nonce = uuid.uuid4().hex[:8]
    try:
        return [
            answer.texts
            for answer in await asyncio.gather(*(
                client.complete(LlmRequest.user(f"Say the word {word}. ({nonce})", max_tokens=8))
                for word in ("apple", "pear")
            ))
        ]  # fmt: skip
    finally:
        await client.close()


def test_overlapping_requests_are_queued_not_cut_short(llm_settings: Settings) -> None:
    """A server that interrupts the streamed answer for a newer request (llama-cpp-python's
    default) would end the first stream without a finish reason, which the client raises."""
    answers = asyncio.run(_answers_of_overlapping_requests(llm_settings))
    assert [len(texts) for texts in answers] == [1, 1]
    assert all(texts[0].strip() for texts in answers)


async def _give_up_on_a_long_answer(settings: Settings) -> None:
    client = AsyncLlmClient(settings)
    prompt = f"Write the numbers from 1 to 400, separated by commas. ({uuid.uuid4().hex[:8]})"
    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(
                client.complete(LlmRequest.user(prompt, max_tokens=600)), timeout=3
            )
    finally:
        await client.close()


def test_an_abandoned_answer_stops_being_generated(llm_settings: Settings) -> None:
    log = ServiceLayout(llm_settings.home).logs / "llm.log"
    if not log.is_file():
        pytest.skip(f"the LLM server was not started by `kgqr services up` (no {log})")
    dropped_before = log.read_text(errors="replace").count(DROPPED)
    asyncio.run(_give_up_on_a_long_answer(llm_settings))
    # The server notices the hang-up at its next token (after the prompt, if still reading it).
    deadline = time.monotonic() + 60
    while log.read_text(errors="replace").count(DROPPED) == dropped_before:
        assert time.monotonic() < deadline, f"{log}: the server kept generating the answer"
        time.sleep(0.5)
