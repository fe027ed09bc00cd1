"""kgqr's roles for a secured cluster (plugin/opensearch/security/kgqr-roles.yml, used by
the local secured node and docker/compose.yml) name the indices plugin/schema.py makes."""

from __future__ import annotations

import fnmatch
from importlib import resources

import yaml

from plugin import schema


def _roles() -> dict:
    text = resources.files("plugin.opensearch.security").joinpath("kgqr-roles.yml").read_text()
    return yaml.safe_load(text)


def test_the_service_role_covers_kgqrs_bookkeeping_and_no_knowledge_base() -> None:
    (permission,) = _roles()["kgqr_service"]["index_permissions"]
    patterns = permission["index_patterns"]
    assert patterns == [
        schema.META_INDEX,
        f"{schema.QUERY_LOG_INDEX}*",
        f"{schema.JUDGMENTS_INDEX}*",
        f"{schema.TUNE_RUNS_INDEX}*",
    ]
    for index in (schema.documents_index("kb"), schema.triples_index("kb")):
        assert not any(fnmatch.fnmatch(index, pattern) for pattern in patterns), index


def test_the_ingest_role_covers_every_index_kgqr_writes() -> None:
    (permission,) = _roles()["kgqr_ingest"]["index_permissions"]
    for template in schema.index_templates(384).values():
        for index_pattern in template["index_patterns"]:
            example = index_pattern.replace("*", "kb")
            assert any(fnmatch.fnmatch(example, p) for p in permission["index_patterns"])
