"""`kgqr plugin install`: put kgqr's definitions into OpenSearch and Neo4j."""

from __future__ import annotations

import click

from kgqr_core.settings import Settings, get_settings


@click.group("plugin")
def plugin() -> None:
    """kgqr's index templates, search pipelines and graph schema."""


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
