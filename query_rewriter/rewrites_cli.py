"""`kgqr rewrites`: manage cached rewrites (warm them ahead of the searches)."""

from __future__ import annotations

from pathlib import Path

import click

from kgqr_core.settings import get_settings
from kgqr_ops.cli_options import caller_option, kb_option, known_kb, strategy_names


@click.group("rewrites")
def rewrites() -> None:
    """Cached rewrites: `warm` computes them before users ask."""


@rewrites.command("warm")
@kb_option(
    "Knowledge base to warm: searched where its clients search it (its documents index, "
    "or an attached index in its text fields)."
)
@click.option("--strategy", default="kar", show_default=True, help="Strategy to warm.")
@click.option(
    "--from-log",
    "top",
    type=click.IntRange(min=1),
    default=None,
    help="Warm the N most frequent queries of the query log for this KB.",
)
@click.option(
    "--file",
    "path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Warm these queries: one per line, or JSONL with a `query` field.",
)
@click.option(
    "--proxy",
    default=None,
    help="The running kgqr proxy (default http://KGQR_PROXY_HOST:KGQR_PROXY_PORT).",
)
@caller_option("The user who will search: rewrites are cached per caller.")
def warm(
    kb: str,
    strategy: str,
    top: int | None,
    path: Path | None,
    proxy: str | None,
    caller: dict[str, str],
) -> None:
    """Precompute STRATEGY's rewrites for frequent queries, through a running proxy, so
    that a budgeted LLM strategy (KGQR_REWRITE_BUDGET_MS) serves them in full at once.
    One query at a time, with a progress bar; prints how each rewrite stands."""
    from tqdm import tqdm

    from kgqr_core import connections
    from query_rewriter.search.warming import (
        WarmRefused,
        frequent_logged_queries,
        queries_from_file,
        warm_queries,
    )
    from workbench.evaluation.cli import target_of

    [strategy] = strategy_names(strategy, "--strategy", single=True)
    if (top is None) == (path is None):
        raise click.UsageError("give exactly one of --from-log N and --file FILE")
    settings = get_settings()
    if path is not None:
        try:
            queries = queries_from_file(path)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--file") from exc
    client = connections.opensearch_client(settings)
    meta = known_kb(client, kb)  # a mistyped name, not a quiet log
    if path is None:
        queries = frequent_logged_queries(client, kb, top or 0)
    target = target_of(kb, meta.attached)  # where the KB's own clients search it
    if not queries:
        raise click.ClickException(
            f"no queries to warm in {path}"
            if path is not None
            else "no queries to warm (is the query log on and filled?)"
        )
    # Behind a front, `kgqr serve`'s proxy listens on 127.0.0.1 only (and so does it on every
    # address): this machine's own, unless the proxy was told one and runs without a front.
    host = settings.proxy.host
    if settings.proxy.front_port or host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    url = proxy or f"http://{host}:{settings.proxy.port}"
    with tqdm(total=len(queries), unit="query", desc=f"warming {strategy}") as bar:
        try:
            report = warm_queries(url, target.index, strategy, queries, caller, bar.update,
                                  query_of=target.query)  # fmt: skip
        except WarmRefused as exc:
            raise click.ClickException(str(exc)) from exc
    click.echo(
        f"{report.computed} rewritten and cached, {report.already_cached} already cached, "
        f"{report.pending} queued in the proxy's background, {len(report.fell_back)} fell back"
    )
    for query in report.fell_back[:10]:
        click.echo(f"  fell back: {query}")
