"""The proxy as `kgqr serve` runs it: the read path's app with the workbench's tuning page
mounted. Composed here, above both, so the read path never imports the workbench."""

from __future__ import annotations

import os

from starlette.applications import Starlette

from kgqr_core.settings import Settings
from query_rewriter.proxy.app import create_app
from query_rewriter.structured_logging import configure
from workbench.tuning.routes import tuning_routes

# The log level `kgqr serve` passes to its worker processes.
WORKER_LOG_LEVEL = "KGQR_SERVE_LOG_LEVEL"


def create_served_app(settings: Settings | None = None) -> Starlette:
    return create_app(settings, extra_routes=tuning_routes())


def create_worker_app() -> Starlette:
    """One of `kgqr serve --workers N`'s processes. uvicorn spawns them afresh, with none
    of the parent's logging: every kgqr line of theirs was dropped (INFO) or printed bare,
    without its facts (WARNING)."""
    configure(os.environ.get(WORKER_LOG_LEVEL, "INFO"))
    return create_served_app()
