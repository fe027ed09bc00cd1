"""kgqr refuses a Neo4j older than its statements need, before a job writes anything."""

from __future__ import annotations

from typing import Any

import pytest

from kgqr_core.settings import ConfigurationError
from plugin.installer import check_neo4j_version

pytestmark = pytest.mark.unit


class _Components:
    """What `CALL dbms.components()` answers, for one kernel version."""

    def __init__(self, version: str) -> None:
        self.version = version

    def execute_query(self, _query: str) -> tuple[list[dict[str, Any]], None, None]:
        return [{"version": self.version}], None, None


@pytest.mark.parametrize("version", ["5.26.30", "5.27.0", "2025.01.0", "2026.10.1-aura"])
def test_a_neo4j_as_new_as_kgqrs_statements_need_is_taken(version: str) -> None:
    check_neo4j_version(_Components(version))


@pytest.mark.parametrize("version", ["5.20.0", "5.25.1", "4.4.40"])
def test_an_older_neo4j_is_refused_saying_which_it_is(version: str) -> None:
    """On one, OpenSearch took a chunk's documents and every graph write failed for good
    (dynamic labels are 5.26's)."""
    with pytest.raises(ConfigurationError, match=f"Neo4j {version} is older than kgqr needs"):
        check_neo4j_version(_Components(version))
