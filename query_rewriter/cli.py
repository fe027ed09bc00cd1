"""`kgqr serve`: run the rewriting proxy."""

from __future__ import annotations

import click

from plugin.settings import get_settings


@click.command("serve")
@click.option("--host", default=None, help="Bind address (default KGQR_PROXY_HOST, 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (default KGQR_PROXY_PORT, 9201).")
@click.option("--log-level", default="INFO", show_default=True)
def serve(host: str | None, port: int | None, log_level: str) -> None:
    """Serve OpenSearch's REST API on HOST:PORT, rewriting searches on kgqr indices.

    Point any OpenSearch client here instead of at OpenSearch. Searches on
    kgqr-KB-documents indices are rewritten with the default strategy
    (KGQR_REWRITE_DEFAULT_STRATEGY, `base`) or the one a request names with
    `?kgqr.strategy=hyde` or `"ext": {"kgqr": {"strategy": "hyde"}}`; add
    `kgqr.explain=true` to see the rewrite in the response. Metrics: GET /metrics.
    """
    import uvicorn

    from query_rewriter.app import create_app
    from query_rewriter.structured_logging import configure

    settings = get_settings()
    configure(log_level)
    uvicorn.run(
        create_app(settings),
        host=host or settings.proxy_host,
        port=port or settings.proxy_port,
        log_level=log_level.lower(),
        access_log=False,
    )
