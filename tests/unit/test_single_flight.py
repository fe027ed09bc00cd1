"""Identical concurrent calls share one computation, and one caller's cancellation is not
the others'."""

from __future__ import annotations

import asyncio

import pytest

from kgqr_core.single_flight import SingleFlight

pytestmark = pytest.mark.unit


def test_callers_arriving_meanwhile_share_one_computation() -> None:
    calls = 0

    async def compute() -> int:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        return 7

    async def run() -> list[tuple[int, bool]]:
        flight: SingleFlight[int] = SingleFlight()
        return list(await asyncio.gather(*(flight.run("k", compute) for _ in range(3))))

    assert sorted(asyncio.run(run())) == [(7, False), (7, True), (7, True)] and calls == 1


def test_a_leader_cancelled_by_its_own_timeout_leaves_the_waiters_to_compute_anew() -> None:
    """The waiters got the leader's CancelledError, which no `except Exception` catches:
    two rewrites sharing one LLM prompt, and the first one's timeout was a 500 for the
    second caller's search."""
    calls = 0

    async def compute() -> int:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.05)
        return calls

    async def run() -> tuple[bool, tuple[int, bool]]:
        flight: SingleFlight[int] = SingleFlight()
        leader = asyncio.ensure_future(asyncio.wait_for(flight.run("k", compute), 0.01))
        await asyncio.sleep(0)
        waiter = asyncio.ensure_future(flight.run("k", compute))
        timed_out = False
        try:
            await leader
        except TimeoutError:
            timed_out = True
        return timed_out, await waiter

    timed_out, (value, shared) = asyncio.run(run())
    assert timed_out and (value, shared) == (2, False) and calls == 2
