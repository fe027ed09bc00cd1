"""The kgqr proxy, as served (kgqr_ops/proxy_app.py), on a free local port in a background
thread, for tests, benchmarks and evaluations that need a real server without a separate
process."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import uvicorn

from kgqr_core.settings import Settings
from kgqr_ops.proxy_app import create_served_app


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# A first start on a machine exports and quantises the default embedder (about a gigabyte,
# minutes on 2 cores): a minute's bound ended every first `kgqr eval` there, mid-export.
START_S = 1_800.0
SAY_AFTER_S = 5.0


class ProxyDidNotStart(RuntimeError):
    pass


@contextmanager
def running_proxy(settings: Settings, say: Callable[[str], None] | None = None) -> Iterator[str]:
    """The proxy's URL once it serves; `say` hears, once, that it is still starting."""
    port = free_port()
    config = uvicorn.Config(
        create_served_app(settings), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)

    def serve() -> None:
        with contextlib.suppress(SystemExit):  # uvicorn's word for a failed startup
            server.run()

    thread = threading.Thread(target=serve, daemon=True)
    started = time.monotonic()
    thread.start()
    told = say is None
    while not server.started:
        waited = time.monotonic() - started
        if not thread.is_alive():
            raise ProxyDidNotStart("kgqr's proxy did not start: its startup failed (logged above)")
        if waited > START_S:
            server.should_exit = True
            raise ProxyDidNotStart(f"kgqr's proxy did not start within {START_S:.0f} s")
        if not told and waited > SAY_AFTER_S and say is not None:
            told = True
            say("starting kgqr's proxy (a first start prepares the embedder: minutes)")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
