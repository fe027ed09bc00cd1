"""Options and argument checks shared by the `kgqr` subcommands: each turns a bad value
(a KB name, a strategy, a query file) into a usage error before anything connects, where
each command once met it as a traceback of its own."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from plugin.schema import check_kb_name

if TYPE_CHECKING:
    from plugin.kb_meta import KnowledgeBaseMeta

F = TypeVar("F", bound=Callable[..., Any])


def checked_kb_name(value: str, **where: Any) -> str:
    """`value` as a knowledge-base name, else a usage error (`where`: BadParameter's ctx
    and param, or param_hint). A bad name used to surface as a ValueError traceback from
    deep inside whichever command first built an index name."""
    try:
        return check_kb_name(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), **where) from exc


def replicas_checked(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A --replicas value checked as it is parsed: it was checked once OpenSearch answered,
    so with the engine down a typo read "OpenSearch could not be reached"."""
    from kgqr_core.settings import REPLICAS

    if value is not None and not re.fullmatch(REPLICAS, value):
        raise click.BadParameter(
            f"{value!r} is neither a number of replicas nor a range such as 0-1 or 0-all",
            ctx=ctx, param=param,
        )  # fmt: skip
    return value


def known_kb(client: Any, kb: str) -> KnowledgeBaseMeta:
    """The KB's kgqr-meta record, or an error saying there is no such KB: a mistyped name
    was told "no plans (run optimize)", "no queries to warm", or loaded a model first."""
    from plugin import kb_meta

    meta = kb_meta.load(client, kb)
    if meta is None:
        raise click.ClickException(f"no knowledge base {kb!r} (`kgqr kb list` lists them)")
    return meta


def _kb_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    return None if value is None else checked_kb_name(value, ctx=ctx, param=param)


def kb_option(help: str, required: bool = True) -> Callable[[F], F]:
    """`--kb NAME`, checked as a knowledge-base name."""
    return click.option("--kb", required=required, callback=_kb_name, help=help)


def _caller_headers(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> dict[str, str]:
    if value is None:
        return {}
    from kgqr_core.connections import basic_authorization

    user, colon, password = value.partition(":")
    if not user:
        raise click.BadParameter("expected USER or USER:PASSWORD", ctx=ctx, param=param)
    if not colon:
        password = click.prompt(f"Password of {user}", hide_input=True)
    return {"authorization": basic_authorization(user, password)}


def caller_option(help: str) -> Callable[[F], F]:
    """`--user USER[:PASSWORD]`: the OpenSearch user a command searches as, through the
    proxy (which never lends kgqr's own account), passed on as the `caller` headers. On a
    secured cluster a command without it searches anonymously and is refused."""
    return click.option(
        "--user",
        "caller",
        default=None,
        metavar="USER[:PASSWORD]",
        callback=_caller_headers,
        help=f"{help} Without :PASSWORD it is asked for (hidden).",
    )


def strategy_names(value: str, option: str, single: bool = False) -> list[str]:
    """Strategy names as typed (comma-separated; `kar boost` or `kar_boost` for
    `kar+boost`), checked against the registry; `single` asks for exactly one."""
    from query_rewriter.strategies import STRATEGIES, known_strategy

    typed = [name.strip() for name in value.split(",") if name.strip()]
    resolved = [known_strategy(name) for name in typed]
    unknown = [name for name, known in zip(typed, resolved, strict=True) if known is None]
    names = [known for known in resolved if known is not None]
    if unknown or not names:
        raise click.BadParameter(
            f"unknown {unknown}; valid: {', '.join(STRATEGIES)}", param_hint=option
        )
    if single and len(names) != 1:
        raise click.BadParameter(f"one strategy, not {len(names)}", param_hint=option)
    return names


def strategy_params(
    values: tuple[str, ...], strategy: str | None = None, param_hint: str = "--param"
) -> dict[str, float]:
    """NAME=NUMBER pairs as strategy parameters (those `strategy` reads, the common ones
    among them, or those any reads), each checked against its range as a request would
    be, else a usage error."""
    from query_rewriter.engine.errors import RewriteRequestError
    from query_rewriter.strategies import ALL_PARAMS, STRATEGIES
    from query_rewriter.strategies.params import request_params

    declared = ALL_PARAMS if strategy is None else STRATEGIES[strategy].readable_params
    known = {param.name for param in declared} | {str(param.legacy) for param in declared}
    params = {}
    valid = ", ".join(sorted(param.name for param in declared)) or "none"
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or name not in known:
            raise click.BadParameter(
                f"{item!r}: expected NAME=NUMBER with NAME one of {valid}",
                param_hint=param_hint,
            )
        try:
            params[name] = float(value)
        except ValueError:
            raise click.BadParameter(
                f"{item!r}: {value!r} is not a number", param_hint=param_hint
            ) from None
        try:  # out of range: refused now, as a request would be, not by the first search
            request_params(declared, {name: params[name]})
        except RewriteRequestError as exc:
            raise click.BadParameter(exc.reason, param_hint=param_hint) from None
    return params


def judged_queries(
    spec: str, hint: str, split: str | None = None, limit: int | None = None
) -> list[Any]:
    """The judged queries `spec` (KIND:PATH) names that have a relevant document, or a
    usage error naming `hint`: a line that is not JSON, a missing file, an id given twice,
    or no such queries at all. A query judged only non-relevant is left out, and said so:
    recall, MRR and AP are undefined without a relevant document, and scored as zeros such
    queries were ties counted in every comparison (the tune page leaves them out too)."""
    from workbench.evaluation.metrics import relevant_ids
    from workbench.evaluation.query_sets import QuerySetError, load_query_set

    try:
        loaded = load_query_set(spec, split, limit)
    except QuerySetError as exc:
        raise click.BadParameter(str(exc), param_hint=hint) from exc
    queries = [query for query in loaded if relevant_ids(query.judgments)]
    if left_out := len(loaded) - len(queries):
        click.echo(f"{spec}: {left_out} of {len(loaded)} queries have no relevant document "
                   "judged and are left out", err=True)  # fmt: skip
    if not queries:
        raise click.BadParameter(f"{spec}: no queries with a relevant document", param_hint=hint)
    return queries
