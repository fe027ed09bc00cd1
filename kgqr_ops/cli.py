"""The `kgqr` command. Subcommand groups are imported only when used, so `kgqr --help`
stays fast and `plugin` does not import the read or write path at start-up."""

from __future__ import annotations

import importlib
from typing import Any

import click

from kgqr_core.settings import ConfigurationError
from kgqr_ops.services.errors import ServiceError

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "services": ("kgqr_ops.services.cli", "Run OpenSearch, Neo4j, Redis and the LLM locally."),
    "ingest": ("ingest.cli", "Load knowledge bases into OpenSearch and Neo4j (Celery jobs)."),
    "eval": (
        "query_rewriter.evaluation.cli:eval_group",
        "Score strategies on judged queries; sweeps.",
    ),
    "serve": ("query_rewriter.cli", "Run the rewriting proxy in front of OpenSearch."),
    "queries": (
        "query_rewriter.evaluation.queries_cli",
        "Synthesize judged relational questions for a KB.",
    ),
    "agent": ("query_rewriter.agent.cli", "Optimise the agent strategy's plans for a KB."),
    "rewrites": ("query_rewriter.rewrites_cli", "Warm cached rewrites for frequent queries."),
    "plugin": ("kgqr_ops.installer_cli", "Install index templates, pipelines and graph schema."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in SUBCOMMANDS:
            return None
        # "module" or "module:attribute"; the attribute defaults to the command's name.
        module_name, _, attribute = SUBCOMMANDS[cmd_name][0].partition(":")
        module = importlib.import_module(module_name)
        command = getattr(module, attribute or cmd_name.replace("-", "_"))
        return command  # type: ignore[no-any-return]

    def invoke(self, ctx: click.Context) -> Any:
        """A configuration kgqr cannot run with, or a local service it cannot start (the
        front's port taken), is one line saying what to change, not a traceback from
        wherever it was found."""
        try:
            return super().invoke(ctx)
        except (ConfigurationError, ServiceError) as exc:
            raise click.ClickException(str(exc)) from exc

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, SUBCOMMANDS[name][1]) for name in sorted(SUBCOMMANDS)])


@click.group(cls=LazyGroup)
def main() -> None:
    """kgqr: a knowledge-graph-aware query rewriter for OpenSearch.

    Configuration comes from KGQR_* environment variables and an optional TOML file
    (KGQR_CONFIG, ./kgqr.toml or ~/.config/kgqr/config.toml).
    """
