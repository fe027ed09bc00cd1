"""Putting kgqr's roles on a cluster (plugin/security_roles.py, `kgqr plugin roles`): what
is compared, what is put, and how a node still starting is waited for. The security REST
API itself is exercised on the secured node (tests/integration/test_secured_access.py)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kgqr_ops.cli import main
from plugin.security_roles import RoleNotPut, grants, kgqr_roles, put_kgqr_roles


def _as_the_api_answers(role: dict[str, Any]) -> dict[str, Any]:
    """A role as GET _plugins/_security/api/roles/NAME shows it: empty limits and flags."""
    shown = copy.deepcopy(role)
    for entry in shown.get("index_permissions", []):
        entry.update({"dls": "", "fls": [], "masked_fields": []})
    shown.update({"reserved": False, "hidden": False, "static": False, "tenant_permissions": []})
    return shown


class FakeCluster:
    """The security API's role endpoints as a dict: what put_kgqr_roles reads and writes."""

    def __init__(self, roles: dict[str, Any], takes_puts: bool = True) -> None:
        self.roles, self.takes_puts = roles, takes_puts
        self.puts: list[str] = []

    def __call__(self, method: str, path: str, body: Any | None) -> Any | None:
        name = path.rsplit("/", 1)[1]
        if method == "GET" or body is None:
            return {name: self.roles[name]} if name in self.roles else None
        self.puts.append(name)
        if not self.takes_puts:
            return None
        self.roles[name] = _as_the_api_answers(body)
        return {"status": "OK"}


def test_a_role_as_the_api_shows_it_grants_what_the_file_says() -> None:
    for role in kgqr_roles().values():
        assert grants(_as_the_api_answers(role)) == grants(role)


def test_only_a_role_that_differs_or_is_missing_is_put_and_its_change_is_named() -> None:
    roles = kgqr_roles()
    widened = _as_the_api_answers(roles["kgqr_service"])
    widened["cluster_permissions"][0] = "cluster_monitor"
    widened["index_permissions"][0]["dls"] = '{"term": {"kb": "x"}}'
    cluster = FakeCluster({"kgqr_service": widened})

    changes = put_kgqr_roles(cluster)

    assert cluster.puts == ["kgqr_service", "kgqr_ingest"]
    service, ingest = changes
    assert service.removed == (
        "cluster: cluster_monitor",
        'kgqr-judgments, kgqr-meta, kgqr-query-log, kgqr-tune-runs: dls "{\\"term\\": '
        '{\\"kb\\": \\"x\\"}}"',
    )
    assert service.added == ("cluster: cluster:monitor/nodes/info",)
    assert service.describe(put=True).splitlines() == [
        "kgqr_service: put",
        *(f"  - {line}" for line in service.removed),
        "  + cluster: cluster:monitor/nodes/info",
    ]
    assert ingest.describe(put=True) == "kgqr_ingest: made"
    assert ingest.describe(put=False) == "kgqr_ingest: missing"
    again = put_kgqr_roles(cluster)
    assert cluster.puts == ["kgqr_service", "kgqr_ingest"]  # nothing put the second time
    assert [c.describe(put=True) for c in again] == [
        "kgqr_service: as kgqr defines it",
        "kgqr_ingest: as kgqr defines it",
    ]


def test_checking_puts_nothing_and_a_refused_put_is_said() -> None:
    cluster = FakeCluster({})
    assert all(change.changed for change in put_kgqr_roles(cluster, check_only=True))
    assert cluster.puts == []
    with pytest.raises(RoleNotPut, match="did not take kgqr's role kgqr_service"):
        put_kgqr_roles(FakeCluster({}, takes_puts=False))


def test_a_node_not_up_is_waited_for_then_said_in_one_line(
    kgqr_env: Callable[..., None],
) -> None:
    from kgqr_ops.background_proxy import free_port

    nowhere = f"http://127.0.0.1:{free_port()}"
    kgqr_env(KGQR_OPENSEARCH_URL=nowhere)
    result = CliRunner().invoke(main, ["plugin", "roles", "--wait", "1"])
    assert result.exit_code == 1
    assert f"waiting for OpenSearch at {nowhere} to start" in result.output
    assert f"Error: OpenSearch could not be reached at {nowhere}: is it running?" in result.output


def test_a_ca_file_not_there_yet_is_waited_for_and_a_certificate_that_fails_is_not(
    kgqr_env: Callable[..., None], tmp_path: Path
) -> None:
    """In compose the CA file is written by the one-shot that secures the node, beside
    this one: waited for. A certificate that does not verify will not start to."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    missing = tmp_path / "root-ca.pem"
    plain = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    threading.Thread(target=plain.serve_forever, daemon=True).start()
    try:
        kgqr_env(KGQR_OPENSEARCH_URL=f"https://127.0.0.1:{plain.server_port}",
                 KGQR_OPENSEARCH_CA_CERTS=str(missing))  # fmt: skip
        no_ca = CliRunner().invoke(main, ["plugin", "roles", "--wait", "1"])
        kgqr_env(KGQR_OPENSEARCH_CA_CERTS=None)
        not_tls = CliRunner().invoke(main, ["plugin", "roles", "--wait", "600"])
    finally:
        plain.shutdown()
        plain.server_close()
    assert no_ca.exit_code == 1
    assert "waiting for OpenSearch" in no_ca.output
    assert no_ca.output.endswith(f"Error: no CA file: {missing}\n"), no_ca.output
    assert not_tls.exit_code == 1 and "waiting" not in not_tls.output, not_tls.output
