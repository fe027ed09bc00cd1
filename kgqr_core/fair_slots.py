"""A few slots (the LLM calls a proxy keeps in flight) shared in turn by their owners.

A local LLM answers one or two calls at a time, ~8 s each. With a first-come queue, one
caller's burst of uncached LLM rewrites put every other caller's behind all of it: a
second caller's single search waited the whole burst (a minute for a dozen) before its
own call ran. Here a slot that frees goes to the next owner in turn, so an owner waits
for the calls in flight and at most one call of each other owner waiting, however many
any of them queued.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class FairSlots:
    def __init__(self, limit: int) -> None:
        self._free = limit
        # Owners with calls waiting, in turn order; each owner's own calls first come,
        # first served.
        self._turns: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    @property
    def waiting(self) -> int:
        return sum(len(waiters) for waiters in self._turns.values())

    @asynccontextmanager
    async def slot(self, owner: str) -> AsyncIterator[None]:
        """Hold one slot for `owner` while the block runs."""
        await self._acquire(owner)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, owner: str) -> None:
        if self._free > 0 and not self._turns:
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._turns.setdefault(owner, deque()).append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release()  # granted as it was cancelled: the slot goes on
            else:
                self._withdraw(owner, waiter)
            raise

    def _release(self) -> None:
        self._free += 1
        while self._free > 0 and self._turns:
            owner, waiters = next(iter(self._turns.items()))
            waiter = waiters.popleft()
            granted = not waiter.done()  # else cancelled, its task not yet told: skipped
            if granted:
                waiter.set_result(None)
                self._free -= 1
            if not waiters:
                del self._turns[owner]
            elif granted:
                self._turns.move_to_end(owner)  # its next call after the others' turns

    def _withdraw(self, owner: str, waiter: asyncio.Future[None]) -> None:
        waiters = self._turns.get(owner)
        if waiters is not None and waiter in waiters:
            waiters.remove(waiter)
            if not waiters:
                del self._turns[owner]
