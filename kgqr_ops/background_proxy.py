"""The kgqr proxy, as served (kgqr_ops/proxy_app.py), on a free local port in a background
thread, for tests, benchmarks and evaluations that need a real server without a separate
process."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from kgqr_core.settings import Settings
from kgqr_ops.proxy_app import create_served_app


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def running_proxy(settings: Settings) -> Iterator[str]:
    port = free_port()
    config = uvicorn.Config(
        create_served_app(settings), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the kgqr proxy did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
