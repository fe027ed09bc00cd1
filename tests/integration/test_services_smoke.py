"""The capabilities every later feature relies on, against the real services."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

from kgqr_core.settings import Settings
from kgqr_ops.services import smoke_checks

# In the edit-test loop (scripts/test-quick.sh): it needs only the always-on services.
pytestmark = pytest.mark.quick


def test_knn_query_on_lucene_hnsw_ranks_nearest_vector_first(
    opensearch: Any, unique_name: str
) -> None:
    assert smoke_checks.knn_ranking(opensearch, unique_name) == ["b", "a", "c"]
    assert not opensearch.indices.exists(index=unique_name)


def test_knn_index_uses_the_lucene_engine(opensearch: Any, unique_name: str) -> None:
    opensearch.indices.create(index=unique_name, body=smoke_checks._vector_index_body(3))
    try:
        mapping = opensearch.indices.get_mapping(index=unique_name)[unique_name]["mappings"]
        method = mapping["properties"]["vector"]["method"]
        assert (method["engine"], method["name"]) == ("lucene", "hnsw")
    finally:
        opensearch.indices.delete(index=unique_name)


def test_hybrid_query_through_normalisation_pipeline_fuses_both_sides(
    opensearch: Any, unique_name: str
) -> None:
    ranking = smoke_checks.hybrid_ranking(opensearch, unique_name, unique_name)
    # k-NN alone would rank c, b, a; BM25 alone matches only a. Fused with 0.3/0.7 weights,
    # c leads and a (the BM25 hit) is lifted above b.
    assert ranking == ["c", "a", "b"]


def test_painless_module_and_plugins_are_installed(opensearch: Any) -> None:
    modules = {
        module["name"]
        for node in opensearch.nodes.info(metric="plugins")["nodes"].values()
        for module in node["modules"]
    }
    plugins = {row["component"] for row in opensearch.cat.plugins(format="json")}
    assert "lang-painless" in modules
    assert {"opensearch-knn", "opensearch-neural-search"} <= plugins


def test_painless_script_runs(opensearch: Any, unique_name: str) -> None:
    opensearch.index(index=unique_name, id="1", body={"n": 20}, refresh=True)
    try:
        body = {
            "script_fields": {
                "doubled": {"script": {"lang": "painless", "source": "doc['n'].value * 2 + 2"}}
            }
        }
        hit = opensearch.search(index=unique_name, body=body)["hits"]["hits"][0]
        assert hit["fields"]["doubled"] == [42]
    finally:
        opensearch.indices.delete(index=unique_name)


def test_neo4j_typed_relationship_round_trip(neo4j_driver: Any, unique_name: str) -> None:
    row = smoke_checks.neo4j_typed_relation(neo4j_driver, unique_name)
    assert row == {"relation": "DIRECTED_BY", "year": 1999, "target": f"person-{unique_name}"}
    leftover, _, _ = neo4j_driver.execute_query(
        "MATCH (n:KgqrSmoke) WHERE n.id ENDS WITH $tag RETURN count(n) AS n", tag=unique_name
    )
    assert leftover[0]["n"] == 0


def test_celery_task_round_trip_through_redis(settings: Settings) -> None:
    answer = smoke_checks.celery_echo(settings)
    assert answer["sent"].startswith("kgqr-smoke-")
    assert (answer["payload"], answer["pid"]) == (answer["sent"], answer["worker_pid"])
    assert smoke_checks.celery_echoed(answer)


def test_local_llm_returns_a_json_object(llm_settings: Settings) -> None:
    answer = smoke_checks.llm_json_object(llm_settings)
    assert isinstance(answer, dict) and answer
    assert "paris" in " ".join(str(v) for v in answer.values()).lower()


def test_kgqr_plugin_install_installs_the_definitions(settings: Any) -> None:
    """`kgqr plugin install`, as a user runs it against their own cluster."""
    from click.testing import CliRunner

    from kgqr_ops.cli import main

    result = CliRunner().invoke(main, ["plugin", "install"])
    assert result.exit_code == 0, result.output
    assert "opensearch: index template kgqr-documents" in result.output
    assert "opensearch: search pipeline" in result.output and "neo4j:" in result.output


def test_redis_refuses_a_client_without_its_password(settings: Settings) -> None:
    import redis

    from kgqr_core.connections import redis_client

    assert redis_client(settings).ping()  # kgqr's own clients carry the password
    address = urlsplit(settings.redis.url)
    anonymous = redis.Redis(host=address.hostname or "127.0.0.1", port=address.port or 6379)
    with pytest.raises(redis.AuthenticationError):
        anonymous.set("kgqr-anonymous-write", "x")
