"""Installs kgqr's definitions into the engines: index templates and the hybrid search
pipeline into OpenSearch, constraints and indexes into Neo4j. Idempotent: run it as
often as you like (ingest jobs run it before writing)."""

from __future__ import annotations

from typing import Any

from plugin import schema

DEFAULT_HYBRID_WEIGHTS = (0.3, 0.7)  # BM25, k-NN


def install_opensearch(
    client: Any, dimension: int, weights: tuple[float, float] = DEFAULT_HYBRID_WEIGHTS
) -> list[str]:
    """Put every index template and the hybrid pipeline; returns what was installed."""
    installed = []
    for name, body in schema.index_templates(dimension).items():
        client.indices.put_index_template(name=name, body=body)
        installed.append(f"index template {name}")
    client.transport.perform_request(
        "PUT", f"/_search/pipeline/{schema.HYBRID_PIPELINE}", body=schema.hybrid_pipeline(*weights)
    )
    installed.append(f"search pipeline {schema.HYBRID_PIPELINE}")
    return installed


def install_neo4j(driver: Any) -> list[str]:
    statements = schema.neo4j_statements()
    for statement in statements:
        driver.execute_query(statement)
    return [statement.split(" IF NOT EXISTS")[0] for statement in statements]
