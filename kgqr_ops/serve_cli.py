"""`kgqr serve`: run the rewriting proxy."""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
from collections.abc import Iterator

import click

from kgqr_core.settings import get_settings


@click.command("serve")
@click.option(
    "--host",
    default=None,
    help="Bind address (default KGQR_PROXY_HOST, 127.0.0.1): the front's where there is one, "
    "the proxy then listening on 127.0.0.1 only (the front is the way in).",
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Port (default KGQR_PROXY_PORT, 9201).",
)
@click.option(
    "--front-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Also run nginx on HOST:FRONT_PORT (default KGQR_FRONT_PORT, off): it passes what "
    "kgqr does not rewrite straight to OpenSearch, which makes pass-through ~1.05x direct "
    "instead of ~1.4x. Point clients there. Needs nginx (apt-get install nginx-light).",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    help="How much the proxy logs (JSON lines on stderr): at INFO, each rewritten search "
    "with its explain (what it became and why) and every fallback; WARNING, what degraded.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Proxy processes sharing the port (each loads its own embedder; the rewrite cache "
    "and LLM answers are shared through Redis, the metrics through a temporary folder).",
)
def serve(host: str | None, port: int | None, front_port: int | None, log_level: str,
          workers: int) -> None:  # fmt: skip
    """Serve OpenSearch's REST API on HOST:PORT, rewriting searches on kgqr indices.

    Point any OpenSearch client here instead of at OpenSearch. Searches on
    kgqr-KB-documents indices are rewritten with the KB's own default, the proxy's
    (KGQR_REWRITE_DEFAULT_STRATEGY, `auto`: `graph` on EmbeddingGemma's KBs, `base` on
    others), or the one a request names with
    `?kgqr.strategy=graph` or `"ext": {"kgqr": {"strategy": "graph"}}`; add
    `kgqr.explain=true` to see the rewrite in the response. `kgqr eval run --help` lists
    the strategies, those to choose from first. Compare them on your own judged queries
    at GET /_kgqr/tune; metrics: GET /_kgqr/metrics.

    \b
      kgqr serve --front-port 9202 --workers 2
      curl -s 'localhost:9201/kgqr-movies-documents/_search?q=Pacino&kgqr.explain=true'
    """
    import uvicorn

    from kgqr_ops.nginx_front import running_front
    from kgqr_ops.proxy_app import create_served_app
    from query_rewriter.strategies import check_default_strategy
    from query_rewriter.structured_logging import configure

    settings = get_settings()
    check_default_strategy(settings.rewrite.default_strategy)  # before any worker starts
    log_level = log_level.upper()
    configure(log_level)
    host = host or settings.proxy.host
    port = port or settings.proxy.port
    front_port = front_port or settings.proxy.front_port
    if front_port == port:
        raise click.BadParameter(
            f"{port} is the proxy's port too: the front needs one of its own",
            param_hint="--front-port",
        )
    front = (
        running_front(settings, host, front_port, port, on_exit=_stop_without_front)
        if front_port
        else contextlib.nullcontext()
    )
    # uvicorn handles SIGTERM itself and, once shut down, raises it again with the handler it
    # found. Python's default handler would end the process on the spot, leaving the front's
    # nginx folder in /tmp; as SystemExit the `with` below removes it first.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    with front as front_url, _shared_by_workers(workers, log_level):
        if front_url:
            click.echo(f"front (nginx) on {front_url}: point clients there", err=True)
        # With several workers each process builds its app from the same environment.
        app = (
            create_served_app(settings) if workers == 1 else "kgqr_ops.proxy_app:create_worker_app"
        )
        uvicorn.run(
            app,
            factory=workers > 1,
            workers=workers,
            # Behind a front, its own address on every interface let whatever reached the
            # host (another container on its network) go round the front's bounds.
            host="127.0.0.1" if front_url else host,
            port=port,
            log_level=log_level.lower(),
            access_log=False,
        )
    if _FRONT_EXITED.is_set():  # a failure, however uvicorn took the stop (with workers: as
        raise SystemExit(1)  # a clean one, and a supervisor restarting on failure did not)


_FRONT_EXITED = threading.Event()


def _stop_without_front(code: int | None) -> None:
    """The front exited: `kgqr serve` stops (as on SIGTERM), failing, for whatever
    supervises it (a container's restart policy, systemd) to start both again, where the
    proxy ran on with no front and nothing noticed."""
    _FRONT_EXITED.set()
    os.kill(os.getpid(), signal.SIGTERM)


@contextlib.contextmanager
def _shared_by_workers(workers: int, log_level: str) -> Iterator[None]:
    """What several worker processes, spawned afresh, are told through their environment:
    the log level, and the folder their metrics are kept in together."""
    if workers == 1:
        yield
        return
    from kgqr_ops.proxy_app import WORKER_LOG_LEVEL
    from query_rewriter.metrics import SHARED_FOLDER

    told = {name: os.environ.get(name) for name in (SHARED_FOLDER, WORKER_LOG_LEVEL)}
    with tempfile.TemporaryDirectory(prefix="kgqr-metrics-") as folder:
        os.environ[SHARED_FOLDER], os.environ[WORKER_LOG_LEVEL] = folder, log_level
        try:
            yield
        finally:  # the folder is gone: a later app of this process keeps its own metrics
            for name, value in told.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
