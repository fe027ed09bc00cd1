"""A warning about a failing service that is said at most once a minute.

A cache that is down is a miss on every request: logged each time, one outage wrote a line
per search (the LLM answer cache, two per LLM call); counted as a miss only, it was told
nowhere. Said once a minute, the log says it without drowning what else happened.
"""

from __future__ import annotations

import logging
import time

EVERY_S = 60.0


class OutageNotice:
    def __init__(self, log: logging.Logger, message: str, every_s: float = EVERY_S) -> None:
        self._log, self._message, self._every_s = log, message, every_s
        self._told_at = float("-inf")

    def tell(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._told_at >= self._every_s:
            self._told_at = now
            error = f"{type(exc).__name__}: {exc}"[:300]
            self._log.warning(self._message, extra={"kgqr": {"error": error}})
