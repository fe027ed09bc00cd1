"""Warnings said at most once a minute.

A cache that is down is a miss on every request: logged each time, one outage wrote a line
per search (the LLM answer cache, two per LLM call); counted as a miss only, it was told
nowhere. Said once a minute, the log says it without drowning what else happened.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable

EVERY_S = 60.0


class OnceEvery:
    """Whether a warning of each kind is due: the first, then one `every_s` after the last
    said. Kinds are few and fixed (a strategy and a stage, a service): never a caller's."""

    def __init__(self, every_s: float = EVERY_S) -> None:
        self._every_s = every_s
        self._said_at: dict[Hashable, float] = {}

    def due(self, kind: Hashable = None) -> bool:
        now = time.monotonic()
        if now - self._said_at.get(kind, float("-inf")) < self._every_s:
            return False
        self._said_at[kind] = now
        return True


class OutageNotice:
    """A failing service's warning, once a minute; the repeats are dropped."""

    def __init__(self, log: logging.Logger, message: str, every_s: float = EVERY_S) -> None:
        self._log, self._message, self._once = log, message, OnceEvery(every_s)

    def tell(self, exc: BaseException) -> None:
        if self._once.due():
            error = f"{type(exc).__name__}: {exc}"[:300]
            self._log.warning(self._message, extra={"kgqr": {"error": error}})
