"""Identical concurrent calls share one computation (the rewrite cache's and the LLM
client's: a burst of the same search must cost one rewrite and one LLM call)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class _Abandoned(Exception):
    """The computation's own caller was cancelled (its timeout, its client gone)."""


class SingleFlight(Generic[T]):
    def __init__(self) -> None:
        self._in_flight: dict[str, asyncio.Future[T]] = {}

    async def run(self, key: str, compute: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """compute() once per key at a time; callers arriving meanwhile await its result
        (or its error). Returns (result, shared): shared for the callers that waited. A
        waiter that gives up does not cancel the computation the others wait for; and a
        computation cancelled with its own caller is not the waiters' cancellation: they
        compute anew. (They got the CancelledError, which no `except Exception` catches:
        one caller's timeout answered another's search with a 500.)"""
        while (pending := self._in_flight.get(key)) is not None:
            try:
                return await asyncio.shield(pending), True
            except _Abandoned:
                continue  # the next waiter to run leads a computation of its own
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._in_flight[key] = future
        try:
            result = await compute()
            future.set_result(result)
            return result, False
        except asyncio.CancelledError:
            future.set_exception(_Abandoned())
            future.exception()
            raise
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it, nobody else must
            raise
        finally:
            del self._in_flight[key]
