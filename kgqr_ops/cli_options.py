"""Options shared by the `kgqr` subcommands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from plugin.schema import check_kb_name

F = TypeVar("F", bound=Callable[..., Any])


def _kb_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Refused as a usage error before any connection: a bad name used to surface as a
    ValueError traceback from deep inside whichever command first built an index name."""
    try:
        return check_kb_name(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from exc


def kb_option(help: str) -> Callable[[F], F]:
    """`--kb NAME`, required, checked as a knowledge-base name."""
    return click.option("--kb", required=True, callback=_kb_name, help=help)
