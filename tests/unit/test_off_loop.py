"""Work whose cost a caller sizes runs off the event loop when large."""

from __future__ import annotations

import asyncio
import threading

import pytest

from query_rewriter.engine.off_loop import OFF_LOOP_BYTES, off_the_loop_if_large

pytestmark = pytest.mark.unit


def test_work_on_many_bytes_runs_on_a_worker_thread_and_on_few_here() -> None:
    async def thread_of(size: int) -> int:
        return await off_the_loop_if_large(size, threading.get_ident)

    async def run() -> tuple[int, int, int]:
        here = threading.get_ident()
        return here, await thread_of(OFF_LOOP_BYTES), await thread_of(OFF_LOOP_BYTES + 1)

    here, few, many = asyncio.run(run())
    assert few == here and many != here


def test_an_answer_kgqr_wrote_has_nothing_left_to_read() -> None:
    """Its content is at hand: a large one was sent to a worker thread to be 'read'."""
    import httpx

    from query_rewriter.engine.forwarding import bytes_to_read, json_answer

    engine = httpx.Response(200, content=b'{"hits": {"hits": []}}')
    written = json_answer({"hits": {"hits": []}}, engine)
    assert bytes_to_read(engine) == len(engine.content) > 0
    assert bytes_to_read(written) == 0 and len(written.content) > 0
