"""Clients for the stores, built from Settings in one place so credentials and timeouts
are applied the same way by ingest, the rewriter, the CLI and the tests."""

from __future__ import annotations

import base64
import ssl
from typing import Any

from kgqr_core.cluster_nodes import configured_urls
from kgqr_core.settings import Settings


def opensearch_basic_auth(settings: Settings) -> tuple[str, str] | None:
    """The (user, password) OpenSearch (and Dashboards) want, or None without security."""
    if settings.opensearch.user and settings.opensearch.password:
        return (settings.opensearch.user, settings.opensearch.password.get_secret_value())
    return None


def basic_authorization(user: str, password: str) -> str:
    """An HTTP Basic Authorization header value."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def opensearch_ssl_context(settings: Settings) -> ssl.SSLContext:
    """How every client of kgqr's (opensearch-py, httpx, aiohttp) checks an https
    OpenSearch, so the CA and verification settings cannot differ between paths."""
    context = ssl.create_default_context(
        cafile=str(settings.opensearch.ca_certs) if settings.opensearch.ca_certs else None
    )
    if not settings.opensearch.verify_certs:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _opensearch_kwargs(settings: Settings) -> dict[str, Any]:
    # Every configured node: opensearch-py sends to another when one fails to connect.
    kwargs: dict[str, Any] = {"hosts": configured_urls(settings), "timeout": 30}
    auth = opensearch_basic_auth(settings)
    if auth is not None:
        kwargs["http_auth"] = auth
    if settings.opensearch.url.startswith("https:"):
        # opensearch-py then ignores (and warns about) its own verify_certs/ca_certs.
        kwargs["ssl_context"] = opensearch_ssl_context(settings)
    return kwargs


def opensearch_client(settings: Settings) -> Any:
    from opensearchpy import OpenSearch

    return OpenSearch(**_opensearch_kwargs(settings))


def cluster_node_urls(settings: Settings) -> list[str]:
    """The configured nodes and those the engine reports (`_nodes/http`, read with kgqr's
    account); the configured ones alone when it may not ask or cannot be reached."""
    return reported_node_urls(settings) or configured_urls(settings)


def reported_node_urls(settings: Settings) -> list[str] | None:
    """The configured nodes and those the engine reports; None when it may not ask or
    cannot be reached (which tells nothing of the nodes there are)."""
    import opensearchpy

    from kgqr_core.cluster_nodes import reported_urls

    urls = configured_urls(settings)
    try:
        answer = opensearch_client(settings).nodes.info(metric="http")
    except opensearchpy.exceptions.OpenSearchException:
        return None
    return list(dict.fromkeys([*urls, *reported_urls(answer, urls[0].split(":", 1)[0])]))


def _neo4j_auth(settings: Settings) -> tuple[str, str]:
    return settings.neo4j.user, settings.neo4j.password.get_secret_value()


def neo4j_driver(settings: Settings, **options: Any) -> Any:
    from neo4j import GraphDatabase

    return GraphDatabase.driver(settings.neo4j.uri, auth=_neo4j_auth(settings), **options)


def async_neo4j_driver(settings: Settings) -> Any:
    """The read path's driver: a search gives up on an unreachable Neo4j after
    `neo4j_search_timeout_s` and falls back. Its queries name properties a knowledge base
    may not have (`relation` on typed relationships); Neo4j warns about that on every
    query, which flooded the log once per search, so that one class of notification is
    turned off."""
    from neo4j import AsyncGraphDatabase

    give_up_s = settings.neo4j.search_timeout_s
    return AsyncGraphDatabase.driver(
        settings.neo4j.uri,
        auth=_neo4j_auth(settings),
        notifications_disabled_categories=["UNRECOGNIZED"],
        connection_timeout=give_up_s,
        max_transaction_retry_time=give_up_s,
    )


def redis_client(settings: Settings) -> Any:
    import redis

    return redis.Redis.from_url(settings.redis.url)
