"""The proxy as `kgqr serve` runs it: the read path's app with the workbench's tuning page
mounted. Composed here, above both, so the read path never imports the workbench."""

from __future__ import annotations

from starlette.applications import Starlette

from kgqr_core.settings import Settings
from query_rewriter.proxy.app import create_app
from workbench.tuning.routes import tuning_routes


def create_served_app(settings: Settings | None = None) -> Starlette:
    return create_app(settings, extra_routes=tuning_routes())
