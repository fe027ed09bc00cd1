"""The `kgqr` command. Subcommand groups are imported only when used, so `kgqr --help`
stays fast and `plugin` does not import the read or write path at start-up."""

from __future__ import annotations

import importlib
from typing import Any

import click

from kgqr_core.settings import ConfigurationError, get_settings
from kgqr_ops.services.errors import ServiceError

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "services": ("kgqr_ops.services.cli", "Run OpenSearch, Neo4j, Redis and the LLM locally."),
    "images": (
        "kgqr_ops.images.cli",
        "Build container images of every kgqr service, without a registry.",
    ),
    "ingest": ("ingest.cli", "Load knowledge bases into OpenSearch and Neo4j (Celery jobs)."),
    "kb": ("ingest.kb_cli", "List knowledge bases; attach an existing index, build its graph."),
    "eval": (
        "workbench.evaluation.cli:eval_group",
        "Score strategies on judged queries; sweeps.",
    ),
    "serve": ("kgqr_ops.serve_cli", "Run the rewriting proxy in front of OpenSearch."),
    "queries": (
        "workbench.questions.cli",
        "Synthesize judged relational questions for a KB.",
    ),
    "agent": ("workbench.agent_plans.cli", "Optimise the agent strategy's plans for a KB."),
    "tune": ("workbench.tuning.cli", "Choose a KB's default strategy from judged queries."),
    "rewrites": ("query_rewriter.rewrites_cli", "Warm cached rewrites for frequent queries."),
    "plugin": (
        "kgqr_ops.installer_cli",
        "kgqr's index templates, pipelines, graph schema and security roles.",
    ),
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
        """A configuration kgqr cannot run with, a local service it cannot start (the
        front's port taken), a knowledge base dropped while a job wrote to it, or a request
        the engine refused (a closed index, a lowered max_result_window) is one line saying
        what happened, not a traceback from wherever it was found."""
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise  # `--help`, a usage error: click's own, read no settings (a bad one was a
            # traceback from `kgqr kb list --help`)
        except (ConfigurationError, ServiceError) as exc:
            raise click.ClickException(str(exc)) from exc
        except Exception as exc:
            from plugin.kb_meta import KnowledgeBaseGone  # not imported at start-up

            if isinstance(exc, KnowledgeBaseGone):
                raise click.ClickException(str(exc)) from exc
            told = _unreachable(exc) or _refused_by_the_engine(exc)
            if told is None:
                raise
            raise click.ClickException(told) from exc

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, SUBCOMMANDS[name][1]) for name in sorted(SUBCOMMANDS)])


def _unreachable(exc: BaseException) -> str | None:
    """What could not be reached, when a command ended on a refused or timed-out
    connection to a store: the most common mistake (services not started) deserves a
    sentence, not a driver's traceback."""
    import httpx
    import neo4j.exceptions
    import opensearchpy.exceptions
    import redis.exceptions

    try:
        settings = get_settings()
    except ConfigurationError:
        return None  # the failure is told as it is
    if isinstance(exc, opensearchpy.exceptions.SSLError):  # reached, but TLS failed
        return (
            f"OpenSearch at {settings.opensearch.url}: TLS failed ({exc.error}); check that "
            "the URL's scheme is the server's (http or https) and that "
            "KGQR_OPENSEARCH_CA_CERTS names the CA that signed its certificate"
        )
    if isinstance(exc, opensearchpy.exceptions.ConnectionError):
        what = f"OpenSearch could not be reached at {settings.opensearch.url}"
    elif isinstance(exc, neo4j.exceptions.ServiceUnavailable):
        what = f"Neo4j could not be reached at {settings.neo4j.uri}"
    elif isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        what = f"Redis could not be reached ({exc})"
    elif isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        url = exc.request.url
        what = f"{url.scheme}://{url.netloc.decode()} could not be reached"
    else:
        return None
    return (
        f"{what}: is it running? (`kgqr services status` shows the local services, "
        "`kgqr serve` starts the proxy; KGQR_OPENSEARCH_URL, KGQR_NEO4J_URI and "
        "KGQR_REDIS_URL say where kgqr looks)"
    )


def _refused_by_the_engine(exc: BaseException) -> str | None:
    """The engine's own error type and reason, when it answered a request with an error
    (opensearch-py's TransportError carries the answer's body)."""
    import opensearchpy.exceptions

    if not isinstance(exc, opensearchpy.exceptions.TransportError) or not isinstance(
        exc.status_code, int
    ):
        return None
    error = exc.info.get("error") if isinstance(exc.info, dict) else None
    cause = (error.get("root_cause") or [error])[0] if isinstance(error, dict) else None
    if isinstance(cause, dict) and cause.get("reason"):
        detail = f"{cause.get('type', exc.error)}: {cause['reason']}"
    else:
        detail = str(exc.error)
    return f"OpenSearch refused a request ({exc.status_code}): {detail}"


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kgqr", prog_name="kgqr")
def main() -> None:
    """kgqr: a knowledge-graph-aware query rewriter for OpenSearch.

    Configuration comes from KGQR_* environment variables and an optional TOML file
    (KGQR_CONFIG, ./kgqr.toml or ~/.config/kgqr/config.toml).
    """


if __name__ == "__main__":  # `python -m kgqr_ops.cli` ran nothing and exited 0
    main()
