"""`kgqr plugin install`: put kgqr's definitions into OpenSearch and Neo4j."""

from __future__ import annotations

import click

from plugin.settings import get_settings


@click.group("plugin")
def plugin() -> None:
    """kgqr's index templates, search pipelines and graph schema."""


@plugin.command()
def install() -> None:
    """Install index templates, the hybrid search pipeline and Neo4j constraints."""
    from plugin import connections, installer
    from plugin.embedder import get_embedder

    settings = get_settings()
    dimension = get_embedder(settings.embedder_model).dimension
    for item in installer.install_opensearch(connections.opensearch_client(settings), dimension):
        click.echo(f"opensearch: {item}")
    with connections.neo4j_driver(settings) as driver:
        for item in installer.install_neo4j(driver):
            click.echo(f"neo4j: {item}")
