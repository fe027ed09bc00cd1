"""A task that proves a worker is consuming: the job runner pings it before enqueueing."""

from __future__ import annotations

import os
import socket

from ingest.celery_app import app


@app.task(name="kgqr.worker.echo")
def echo(payload: str) -> dict[str, str | int]:
    """Return the payload with the worker's identity, so a caller sees who answered."""
    return {"payload": payload, "host": socket.gethostname(), "pid": os.getpid()}
