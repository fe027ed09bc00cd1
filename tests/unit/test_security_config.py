"""kgqr's roles for a secured cluster (plugin/opensearch/security/kgqr-roles.yml, used by
the local secured node and docker/compose.yml) name the indices plugin/schema.py makes."""

from __future__ import annotations

import fnmatch

from plugin import schema
from plugin.security_roles import kgqr_roles


def test_the_service_role_covers_kgqrs_bookkeeping_and_no_knowledge_base() -> None:
    """By exact names: `kgqr-query-log*` matched a KB named `query-log-...` too. Beside
    them, the graphs' copies, by id only, and the triples, searched for every caller and
    checked as each: no documents index matches their patterns."""
    bookkeeping, graphs, triples = kgqr_roles()["kgqr_service"]["index_permissions"]
    assert bookkeeping["index_patterns"] == [
        schema.META_INDEX,
        schema.QUERY_LOG_INDEX,
        schema.JUDGMENTS_INDEX,
        schema.TUNE_RUNS_INDEX,
    ]
    assert graphs["index_patterns"] == ["kgqr-*-graph", "kgqr-*-vectors"]
    assert graphs["allowed_actions"] == ["get", "indices:admin/mappings/get"]
    assert fnmatch.fnmatch(schema.graph_index("movies"), "kgqr-*-graph")
    assert fnmatch.fnmatch(schema.vectors_index("movies"), "kgqr-*-vectors")
    assert triples["index_patterns"] == ["kgqr-*-triples"]
    assert triples["allowed_actions"] == ["read"]
    for kb in ("graph", "x-graph", "vectors", "x-vectors", "triples", "x-triples", "movies"):
        assert fnmatch.fnmatch(schema.triples_index(kb), "kgqr-*-triples")
        for content in (schema.documents_index(kb), schema.deadletter_index(kb),
                        schema.generation_index(schema.documents_index(kb), 3)):  # fmt: skip
            for pattern in [*graphs["index_patterns"], *triples["index_patterns"]]:
                assert not fnmatch.fnmatch(content, pattern), content
        for pattern in graphs["index_patterns"]:
            assert not fnmatch.fnmatch(schema.triples_index(kb), pattern)


def test_the_ingest_role_covers_every_index_kgqr_writes() -> None:
    (permission,) = kgqr_roles()["kgqr_ingest"]["index_permissions"]
    for template in schema.index_templates(384).values():
        for index_pattern in template["index_patterns"]:
            example = index_pattern.replace("*", "kb")
            assert any(fnmatch.fnmatch(example, p) for p in permission["index_patterns"])


def test_no_kgqr_role_may_change_ingest_pipelines() -> None:
    """kgqr uses none; the right reached every team's (a `drop` processor in a team's
    default pipeline discards its documents)."""
    for role in ("kgqr_service", "kgqr_ingest"):
        granted = kgqr_roles()[role]["cluster_permissions"]
        assert "cluster_manage_pipelines" not in granted, role
        assert not [p for p in granted if "ingest/pipeline" in p], role
