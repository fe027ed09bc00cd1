"""Work whose cost follows a size a caller chooses (a request body, an answer of 10,000
hits), moved off the event loop when that size is large: on the loop, every other
caller's search waits for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import anyio

T = TypeVar("T")

# Past this many bytes, work runs on a worker thread: json.loads of 10 MB takes tens of
# milliseconds, an answer of 2,000 hits with their vectors (17 MB) 100 ms to read and 40
# ms to write. Below it, a thread's hand-off costs more than the work.
OFF_LOOP_BYTES = 256 * 1024


async def off_the_loop_if_large(size: int, work: Callable[[], T]) -> T:
    """`work()`, which reads `size` bytes, on a worker thread when they are many, else here."""
    if size <= OFF_LOOP_BYTES:
        return work()
    return await anyio.to_thread.run_sync(work)
