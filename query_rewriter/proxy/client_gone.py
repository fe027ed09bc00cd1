"""A search whose client has closed the connection is stopped, not finished for nobody.

Finished, its rewrite went on holding what other callers wait for: kgqr's LLM and
rewrite slots and the LLM itself (15-80 s a call on a CPU; `kar` makes two), and its
engine searches. An app that gives up after a few seconds and retries stacked abandoned
rewrites ahead of everyone's. Stopped, the work is cancelled where it waits: an LLM
call's stream is closed (the local LLM server stops at its next token), a rewrite shared with
other callers' identical searches goes on for them (kgqr_core/single_flight.py), and a
budgeted rewrite already handed to the background finishes there for the cache.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive

log = logging.getLogger("kgqr.proxy")

# nginx's status for a request whose client closed the connection first: nobody reads the
# answer, but the metrics count it apart from kgqr's own answers.
CLIENT_CLOSED = 499


async def answered_unless_gone(
    request: Request, answer: Callable[[], Awaitable[Response]]
) -> Response:
    """`answer()`, or a 499 once the client closes the connection before it is ready. Call
    it only once the request's body has been read: the ASGI messages after the body say
    whether the client is still there."""
    started = time.monotonic()
    with anyio.CancelScope() as scope:
        watcher = asyncio.create_task(_cancel_when_gone(request.receive, scope))
        try:
            return await answer()
        finally:
            watcher.cancel()
    log.info(
        "the client closed the connection: its search was stopped",
        extra={"kgqr": {"path": request.url.path,
                        "after_ms": round((time.monotonic() - started) * 1000)}},
    )  # fmt: skip
    return Response(status_code=CLIENT_CLOSED)


async def _cancel_when_gone(receive: Receive, scope: anyio.CancelScope) -> None:
    """Cancel `scope` when the server reports the client gone. Any other message (a server
    that sends one after the body) ends the watch: nothing then tells a closed connection."""
    try:
        message = await receive()
    except Exception:  # a server that cannot be asked: the search just runs to its end
        return
    if message["type"] == "http.disconnect":
        scope.cancel()
