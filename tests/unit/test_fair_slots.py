"""The LLM's slots taken in turn by callers: one caller's burst does not queue another's
single call behind all of it."""

from __future__ import annotations

import asyncio
import time

from kgqr_core.fair_slots import FairSlots
from kgqr_core.llm import AsyncLlmClient, LlmRequest
from tests.unit.test_llm_streaming import ScriptedStream, settings_for


async def _calls(slots: FairSlots, owners: list[str], hold_s: float) -> list[str]:
    """Each owner's call started in this order, one slot held `hold_s` each: the order in
    which they got a slot."""
    served: list[str] = []
    running, most = 0, 0

    async def call(name: str) -> None:
        nonlocal running, most
        async with slots.slot(name[0]):
            running += 1
            most = max(most, running)
            served.append(name)
            await asyncio.sleep(hold_s)
            running -= 1

    tasks = []
    for n, owner in enumerate(owners):
        tasks.append(asyncio.create_task(call(f"{owner}{n}")))
        await asyncio.sleep(0)  # each waits in the order started
    await asyncio.gather(*tasks)
    assert most == 1
    return served


def test_a_free_slot_goes_to_each_waiting_owner_in_turn() -> None:
    served = asyncio.run(_calls(FairSlots(1), ["a"] * 5 + ["b", "c", "b"], 0.01))
    # a0 held the slot; b's first call waited behind one of a's, not four.
    assert served == ["a0", "a1", "b5", "c6", "a2", "b7", "a3", "a4"]


def test_a_waiter_that_gives_up_leaves_its_turn_and_no_slot_is_lost() -> None:
    async def run() -> None:
        slots = FairSlots(1)
        release = asyncio.Event()

        async def hold(owner: str) -> None:
            async with slots.slot(owner):
                await release.wait()

        holder = asyncio.create_task(hold("a"))
        await asyncio.sleep(0)
        quitter = asyncio.create_task(hold("b"))
        await asyncio.sleep(0)
        assert slots.waiting == 1
        quitter.cancel()
        await asyncio.sleep(0)
        assert slots.waiting == 0
        release.set()
        await holder
        async with asyncio.timeout(1):  # the slot is free again
            async with slots.slot("c"):
                pass

    asyncio.run(run())


def test_a_waiter_cancelled_as_its_slot_is_granted_passes_the_slot_on() -> None:
    async def run() -> None:
        slots = FairSlots(1)
        release = asyncio.Event()
        granted: list[str] = []

        async def hold(owner: str) -> None:
            async with slots.slot(owner):
                granted.append(owner)
                await release.wait()

        late: list[asyncio.Task[None]] = []

        async def hold_then_cancel() -> None:
            await hold("a")
            late[0].cancel()  # in the step that granted it its slot, before it ran

        holder = asyncio.create_task(hold_then_cancel())
        await asyncio.sleep(0)
        late.append(asyncio.create_task(hold("b")))
        next_in_line = asyncio.create_task(hold("c"))
        await asyncio.sleep(0)
        release.set()
        async with asyncio.timeout(1):
            await asyncio.gather(holder, next_in_line)
        assert late[0].cancelled() and granted == ["a", "c"]

    asyncio.run(run())


def test_the_llm_client_serves_another_caller_before_the_rest_of_a_burst() -> None:
    endpoint = ScriptedStream(['{"a": ', '"b"', "}"], gap_s=0.05)

    async def run() -> None:
        async with settings_for(endpoint) as base:
            client = AsyncLlmClient(base.replaced({"llm_max_concurrent": 1}))
            done: dict[str, float] = {}

            async def ask(caller: str, prompt: str) -> None:
                await client.complete(LlmRequest.user(prompt), scope=caller)
                done[prompt] = time.perf_counter()

            try:
                burst = [asyncio.create_task(ask("a", f"a{n}")) for n in range(5)]
                await asyncio.sleep(0.05)
                await asyncio.gather(ask("b", "b0"), *burst)
            finally:
                await client.close()
            order = sorted(done, key=done.__getitem__)
            assert order.index("b0") <= 2, order  # behind a0 in flight and a1, not a4

    asyncio.run(run())


def test_a_cancelled_waiter_skipped_does_not_cost_its_owner_the_turn() -> None:
    async def run() -> list[str]:
        slots, release, served = FairSlots(1), asyncio.Event(), []
        waiting: dict[str, asyncio.Task[None]] = {}

        async def hold(name: str) -> None:
            async with slots.slot(name[0]):
                served.append(name)
                await release.wait()
                if name == "x0":
                    waiting["a1"].cancel()  # in the step that frees the slot: not yet told

        holder = asyncio.create_task(hold("x0"))
        await asyncio.sleep(0)
        waiting.update((n, asyncio.create_task(hold(n))) for n in ("a1", "a2", "b1"))
        await asyncio.sleep(0)
        release.set()
        await asyncio.gather(holder, *waiting.values(), return_exceptions=True)
        return served

    assert asyncio.run(run()) == ["x0", "a2", "b1"]  # a's turn went to its next call
