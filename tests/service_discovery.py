"""Finding real services for integration tests (see conftest.py for the order)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from urllib.parse import urlparse

from kgqr_core.settings import Settings
from kgqr_ops.services.process import port_is_open
from tests.container_services import store_containers, use_container_engine

START_HINT = (
    "start them with `kgqr services up` (or `bash scripts/test.sh`, which does), "
    "or point KGQR_OPENSEARCH_URL / KGQR_NEO4J_URI / KGQR_REDIS_URL / KGQR_LLM_BASE_URL at "
    "running services, or run a Docker daemon for testcontainers"
)


def _reachable(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    return port_is_open(parsed.hostname or "127.0.0.1", parsed.port or default_port)


def require_llm(settings: Settings) -> None:
    if "llm" in missing_services(settings):
        raise RuntimeError(f"this test needs the LLM at {settings.llm.base_url}: {START_HINT}")


def missing_services(settings: Settings) -> list[str]:
    checks = {
        "opensearch": (settings.opensearch.url, 9200),
        "neo4j": (settings.neo4j.uri, 7687),
        "redis": (settings.redis.url, 6379),
        "llm": (settings.llm.base_url, 8080),
    }
    return [name for name, (url, port) in checks.items() if not _reachable(url, port)]


def docker_daemon_answers() -> bool:
    """True only when a Docker engine answers; the docker CLI alone does not count."""
    try:
        import docker

        docker.from_env(timeout=3).ping()  # type: ignore[attr-defined]
        return True
    except Exception:  # no socket, no permission, no daemon: all mean "no Docker"
        return False


CONTAINERS = "containers"


def wants_containers() -> bool:
    """KGQR_TEST_SERVICES=containers: start every service from kgqr's images even where
    local ones answer (how CI exercises the testcontainers path)."""
    return os.environ.get("KGQR_TEST_SERVICES") == CONTAINERS


@contextlib.contextmanager
def discover_services() -> Iterator[Settings]:
    settings = Settings()
    # The stores are needed by every integration test; the LLM is checked by its own fixture.
    missing = [name for name in missing_services(settings) if name != "llm"]
    if not missing and not wants_containers():
        yield settings
        return
    if wants_containers() or docker_daemon_answers():
        use_container_engine(settings)
        with store_containers(settings) as containerised:
            yield containerised
        return
    raise RuntimeError(f"integration tests need {', '.join(missing)} running: {START_HINT}")
