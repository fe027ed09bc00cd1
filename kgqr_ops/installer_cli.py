"""`kgqr plugin install` and `kgqr plugin roles`: put kgqr's definitions into OpenSearch
and Neo4j, and its roles onto a secured cluster."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from kgqr_core.settings import Settings, get_settings

if TYPE_CHECKING:
    from plugin.security_roles import SecurityCall


@click.group("plugin")
def plugin() -> None:
    """kgqr's index templates, search pipelines, graph schema and security roles."""


@plugin.command()
@click.option(
    "--dashboards",
    "dashboards_url",
    metavar="URL",
    default=None,
    help="Also import the query-log dashboard into OpenSearch Dashboards at URL "
    "(e.g. http://localhost:5601), with KGQR_OPENSEARCH_USER/PASSWORD if set.",
)
def install(dashboards_url: str | None) -> None:
    """Install index templates, the hybrid search pipeline and Neo4j constraints; with
    --dashboards, the saved objects (index pattern, visualisations, dashboard) too."""
    from kgqr_core import connections
    from kgqr_core.embedder import embedder_dimension
    from plugin import installer

    settings = get_settings()
    if dashboards_url:
        _import_dashboards(dashboards_url, settings)
    dimension = embedder_dimension(settings.embedder.model)
    for item in installer.install_opensearch(
        connections.opensearch_client(settings), dimension, settings.rewrite
    ):
        click.echo(f"opensearch: {item}")
    with connections.neo4j_driver(settings) as driver:
        for item in installer.install_neo4j(driver):
            click.echo(f"neo4j: {item}")


def _import_dashboards(url: str, settings: Settings) -> None:
    import httpx

    from kgqr_core.connections import opensearch_basic_auth
    from plugin.dashboards_import import DashboardsImportError, import_saved_objects

    try:
        with httpx.Client(auth=opensearch_basic_auth(settings), timeout=60) as client:
            count = import_saved_objects(client, url)
    except (httpx.HTTPError, DashboardsImportError) as exc:
        raise click.ClickException(f"dashboards import into {url} failed: {exc}") from exc
    click.echo(f"dashboards: imported {count} saved objects into {url}")


@plugin.command()
@click.option(
    "--check", is_flag=True, help="Only say how the cluster's roles differ; exit 1 if they do."
)
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    metavar="SECONDS",
    help="Wait up to this long for a node still starting (unreachable, or its security "
    "not yet initialised), as a container started beside it must.",
)
def roles(check: bool, wait_s: float) -> None:
    """Put kgqr's roles (kgqr_service, kgqr_ingest) on a cluster with the security
    plugin, as this version defines them, and say what each gained or lost. Run it as a
    user who may change roles (KGQR_OPENSEARCH_USER/PASSWORD of an admin) after each
    upgrade: a cluster keeps the roles it was first given. The users mapped to them are
    yours to keep."""
    import time

    from kgqr_core import connections
    from plugin.security_roles import RoleNotPut, put_kgqr_roles

    settings = get_settings()
    deadline, waited = time.monotonic() + wait_s, False
    while True:
        try:
            # A client per attempt: a CA file not written yet shows only as one is made.
            with connections.opensearch_client(settings) as client:
                changes = put_kgqr_roles(_security_call(client, settings), check_only=check)
            break
        except RoleNotPut as exc:
            raise click.ClickException(str(exc)) from exc
        except Exception as exc:
            if not _still_starting(exc) or time.monotonic() >= deadline:
                if isinstance(exc, FileNotFoundError):  # the CA file, from the client
                    raise click.ClickException(
                        f"no CA file: {settings.opensearch.ca_certs}"
                    ) from exc
                raise
            if not waited:
                click.echo(
                    f"waiting for OpenSearch at {settings.opensearch.url} to start", err=True
                )
                waited = True
            time.sleep(2.0)
    for change in changes:
        click.echo(change.describe(put=not check))
    if check and any(change.changed for change in changes):
        raise SystemExit(1)


def _still_starting(exc: Exception) -> bool:
    """A node (or a container beside it) not ready yet: unreachable, its security not
    initialised (503), or the CA file the one-shot that secures it writes not there yet.
    A certificate that does not verify is not waited out."""
    from opensearchpy.exceptions import ConnectionError as Unreachable
    from opensearchpy.exceptions import SSLError, TransportError

    if isinstance(exc, SSLError):
        return False
    if isinstance(exc, Unreachable | FileNotFoundError):
        return True
    return isinstance(exc, TransportError) and exc.status_code == 503


def _security_call(client: Any, settings: Settings) -> SecurityCall:
    """The security REST API as the configured user, a role that is not there as None,
    and what the user cannot do said in one line."""
    from opensearchpy.exceptions import AuthorizationException, NotFoundError, RequestError

    def call(method: str, path: str, body: object | None) -> object | None:
        try:
            return client.transport.perform_request(method, path, body=body)
        except NotFoundError:
            return None  # the role is not there yet
        except AuthorizationException as exc:
            raise click.ClickException(
                f"{settings.opensearch.user or 'no user'} may not change roles: run it with "
                "an admin's KGQR_OPENSEARCH_USER/PASSWORD"
            ) from exc
        except RequestError as exc:
            if "no handler found" in str(exc.error):
                raise click.ClickException(
                    "this cluster has no security plugin, so no roles to put"
                ) from exc
            raise

    return call
