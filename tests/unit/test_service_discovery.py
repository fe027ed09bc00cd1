from __future__ import annotations

import socket

import pytest

from kgqr_core.settings import Settings
from tests import service_discovery


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_missing_services_names_each_unreachable_one() -> None:
    port = _free_port()
    settings = Settings.of(
        {
            "opensearch_url": f"http://127.0.0.1:{port}",
            "neo4j_uri": f"bolt://127.0.0.1:{port}",
            "redis_url": f"redis://127.0.0.1:{port}/0",
            "llm_base_url": f"http://127.0.0.1:{port}/v1",
        }
    )
    assert service_discovery.missing_services(settings) == ["opensearch", "neo4j", "redis", "llm"]


def test_without_services_or_docker_the_run_fails_with_a_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = _free_port()
    monkeypatch.setenv("KGQR_OPENSEARCH_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(service_discovery, "docker_daemon_answers", lambda: False)
    with (
        pytest.raises(RuntimeError, match=r"opensearch.*kgqr services up"),
        service_discovery.discover_services(),
    ):
        pass
