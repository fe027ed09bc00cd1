"""Identical concurrent calls share one computation (the rewrite cache's and the LLM
client's: a burst of the same search must cost one rewrite and one LLM call)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SingleFlight(Generic[T]):
    def __init__(self) -> None:
        self._in_flight: dict[str, asyncio.Future[T]] = {}

    async def run(self, key: str, compute: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """compute() once per key at a time; callers arriving meanwhile await its result
        (or its error). Returns (result, shared): shared for the callers that waited. A
        waiter that gives up does not cancel the computation the others wait for."""
        pending = self._in_flight.get(key)
        if pending is not None:
            return await asyncio.shield(pending), True
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._in_flight[key] = future
        try:
            result = await compute()
            future.set_result(result)
            return result, False
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it, nobody else must
            raise
        finally:
            del self._in_flight[key]
