"""Finding real services for integration tests (see conftest.py for the order)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from urllib.parse import urlparse

from kgqr_core.settings import Settings
from kgqr_ops.services.process import port_is_open

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


@contextlib.contextmanager
def discover_services() -> Iterator[Settings]:
    settings = Settings()
    # The stores are needed by every integration test; the LLM is checked by its own fixture.
    missing = [name for name in missing_services(settings) if name != "llm"]
    if not missing:
        yield settings
        return
    if docker_daemon_answers():
        with _testcontainers(settings) as containerised:
            yield containerised
        return
    raise RuntimeError(f"integration tests need {', '.join(missing)} running: {START_HINT}")


@contextlib.contextmanager
def _testcontainers(settings: Settings) -> Iterator[Settings]:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    with contextlib.ExitStack() as stack:
        opensearch = stack.enter_context(
            DockerContainer(f"opensearchproject/opensearch:{settings.opensearch.version}")
            .with_env("discovery.type", "single-node")
            .with_env("DISABLE_SECURITY_PLUGIN", "true")
            .with_env("OPENSEARCH_JAVA_OPTS", "-Xms1g -Xmx1g")
            .with_exposed_ports(9200)
        )
        neo4j = stack.enter_context(
            DockerContainer("neo4j:5.26-community")
            .with_env("NEO4J_AUTH", "none")
            .with_exposed_ports(7687)
        )
        redis = stack.enter_context(DockerContainer("redis:7").with_exposed_ports(6379))
        wait_for_logs(opensearch, "started", timeout=180)
        wait_for_logs(neo4j, "Started.", timeout=120)
        wait_for_logs(redis, "Ready to accept connections", timeout=30)

        def address(container: DockerContainer, port: int) -> str:
            return f"{container.get_container_host_ip()}:{container.get_exposed_port(port)}"

        overrides = {
            "opensearch_url": f"http://{address(opensearch, 9200)}",
            "neo4j_uri": f"bolt://{address(neo4j, 7687)}",
            "redis_url": f"redis://{address(redis, 6379)}/0",
            "cache_redis_url": f"redis://{address(redis, 6379)}/1",
        }
        for key, value in overrides.items():
            os.environ[f"KGQR_{key.upper()}"] = value
        yield Settings()  # reads the overrides just exported, as the services under test do
