"""docker/compose.yml run for real: the sample KB ingested through the worker container and
searched through the front container with an unmodified opensearch-py client, as a user
and as a restricted user (document-level security), on the secured OpenSearch container.

Needs the images `kgqr images build` makes (scripts/test.sh builds them first) and podman
or docker; it skips only where neither engine is installed.
"""

from __future__ import annotations

import json
import os
import random
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opensearchpy import OpenSearch
from opensearchpy.exceptions import ConnectionError as OpenSearchConnectionError
from opensearchpy.exceptions import TransportError

from kgqr_core.settings import Settings
from kgqr_ops.images.catalog import DOCKER_DIR, IMAGES
from kgqr_ops.images.engine import ContainerEngine, container_engine

PROJECT = "kgqr-smoke"
KB = "movies"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tiny_kb"
HIDDEN = "m1"  # Heat: the restricted user's DLS hides it
QUERY = {"query": {"match": {"text": "bank robbers and the police"}}, "size": 5}
STACK_TIMEOUT_S = 420


@dataclass(frozen=True)
class Stack:
    engine: ContainerEngine
    command: list[str]
    environment: dict[str, str]
    front_port: int
    admin_password: str

    def container(self, service: str) -> str:
        found = self.engine.run(
            ["ps", "--format", "{{.Names}}",
             "--filter", f"label=io.podman.compose.project={PROJECT}",
             "--filter", f"label=com.docker.compose.service={service}"],
            capture=True,
        ).stdout.split()  # fmt: skip
        assert found, f"no running {service} container in {PROJECT}"
        return found[0]

    def in_worker(self, *argv: str) -> str:
        done = self.engine.run(["exec", self.container("worker"), *argv], capture=True, check=False)
        assert done.returncode == 0, (
            f"{' '.join(argv)}: {done.stdout[-3000:]} {done.stderr[-3000:]}"
        )
        return done.stdout

    def client(self, user: str, password: str) -> OpenSearch:
        """opensearch-py as any app builds it; only the URL is the front's."""
        return OpenSearch(
            hosts=[{"host": "127.0.0.1", "port": self.front_port}],
            http_auth=(user, password),
            timeout=120,
        )


def _free_port() -> int:
    """A port below the kernel's ephemeral range that nothing listens on now. A port from
    `bind(0)` lies inside that range, and between its release and podman's bind the suite's
    own outgoing connections took it ("address already in use", seen in CI); below the
    range only a listener takes a port, and nothing here listens on a random one."""
    port_range = Path("/proc/sys/net/ipv4/ip_local_port_range")
    first_ephemeral = int(port_range.read_text().split()[0]) if port_range.exists() else 32768
    while True:
        port = random.randrange(first_ephemeral // 2, first_ephemeral)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


def _compose_command(engine: ContainerEngine) -> list[str]:
    if not engine.is_podman:
        return [engine.binary, "compose"]
    podman_compose = shutil.which("podman-compose") or str(
        Path(sys.executable).parent / "podman-compose"
    )
    return [podman_compose, "--podman-path", engine.binary]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    if not (shutil.which("podman") or shutil.which("docker")):
        pytest.skip("neither podman nor docker is installed: the compose stack cannot run")
    settings = Settings()
    engine = container_engine(settings)
    missing = [
        spec.tag(settings) for spec in IMAGES.values() if not engine.image_id(spec.tag(settings))
    ]
    if missing:
        pytest.fail(f"images not built: {', '.join(missing)}; run `kgqr images build`")
    passwords = {
        name: secrets.token_urlsafe(12) + "Aa1!"
        for name in ("KGQR_OPENSEARCH_ADMIN_PASSWORD", "KGQR_OPENSEARCH_PASSWORD",
                     "KGQR_INGEST_OPENSEARCH_PASSWORD", "KGQR_DASHBOARDS_PASSWORD",
                     "KGQR_REDIS_PASSWORD", "KGQR_LLM_API_KEY")
    }  # fmt: skip
    front_port = _free_port()
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("KGQR_")},
        **engine.environment(),
        **passwords,
        "KGQR_COMPOSE_OPENSEARCH_PORT": str(_free_port()),
        "KGQR_COMPOSE_FRONT_PORT": str(front_port),
        # What the suite gives every rewrite (tests/conftest.py): the tests check what a
        # rewrite does, not how fast a busy machine's LLM answers.
        "KGQR_REWRITE_TIMEOUT_S": os.environ["KGQR_REWRITE_TIMEOUT_S"],
        "KGQR_LLM_TIMEOUT_S": os.environ["KGQR_LLM_TIMEOUT_S"],
    }
    command = [*_compose_command(engine), "-p", PROJECT, "-f", str(DOCKER_DIR / "compose.yml"),
               "--profile", "llm"]  # fmt: skip
    running = Stack(engine, command, environment, front_port,
                    passwords["KGQR_OPENSEARCH_ADMIN_PASSWORD"])  # fmt: skip
    _compose(running, "down", "-v")  # what a killed run left
    try:
        _compose(running, "up", "-d")
        _until_the_front_answers(running)
        yield running
    finally:
        if os.environ.get("KGQR_KEEP_COMPOSE_STACK") != "1":
            _compose(running, "down", "-v")


def _compose(stack: Stack, *args: str) -> None:
    done = subprocess.run([*stack.command, *args], env=stack.environment,
                          capture_output=True, text=True, timeout=STACK_TIMEOUT_S)  # fmt: skip
    assert done.returncode == 0, (
        f"compose {' '.join(args)}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    )


def _until_the_front_answers(stack: Stack) -> None:
    admin = stack.client("admin", stack.admin_password)
    deadline = time.monotonic() + STACK_TIMEOUT_S
    while True:
        try:
            if admin.cluster.health()["status"] in ("green", "yellow"):
                return
        except (OpenSearchConnectionError, TransportError) as exc:
            if time.monotonic() > deadline:
                logs = subprocess.run(
                    [*stack.command, "logs", "--tail", "40"],
                    env=stack.environment, capture_output=True, text=True,
                )  # fmt: skip
                pytest.fail(f"the stack's front never answered: {exc}\n{logs.stdout[-6000:]}")
        time.sleep(2)


@pytest.fixture(scope="module")
def users(stack: Stack) -> dict[str, str]:
    """A reader of the movie KB and a restricted reader whose DLS hides Heat, made by the
    admin through the front, as an operator would."""
    admin = stack.client("admin", stack.admin_password)
    made: dict[str, str] = {}
    hide = json.dumps({"bool": {"must_not": {"ids": {"values": [HIDDEN]}}}})
    for user, extra in (("smoke-reader", {}), ("smoke-restricted", {"dls": hide})):
        password = secrets.token_urlsafe(12) + "Aa1!"
        role = {
            "cluster_permissions": ["cluster_composite_ops_ro"],
            "index_permissions": [
                {"index_patterns": [f"kgqr-{KB}-*"], "allowed_actions": ["read"], **extra}
            ],
        }
        for path, body in (
            (f"roles/{user}", role),
            (f"internalusers/{user}", {"password": password}),
            (f"rolesmapping/{user}", {"users": [user]}),
        ):
            admin.transport.perform_request("PUT", f"/_plugins/_security/api/{path}", body=body)
        made[user] = password
    return made


@pytest.fixture(scope="module")
def ingested(stack: Stack) -> str:
    """The sample KB, ingested by `kgqr ingest` in the worker container (as kgqr-ingest):
    its chunks go through Redis to the worker's Celery process."""
    stack.engine.run(["cp", str(FIXTURE), f"{stack.container('worker')}:/tmp/tiny_kb"])
    stack.in_worker("kgqr", "ingest", "jsonl:/tmp/tiny_kb", "--kb", KB)
    verified = stack.in_worker("kgqr", "ingest", "verify", "--kb", KB)
    return verified


def _search(client: OpenSearch, strategy: str) -> dict[str, Any]:
    return client.search(index=f"kgqr-{KB}-documents", body=QUERY,
                         params={"kgqr.strategy": strategy, "kgqr.explain": "true"})  # fmt: skip


def test_the_sample_kb_lands_through_the_worker_container(ingested: str) -> None:
    """`kgqr ingest verify` counts each type in OpenSearch and in Neo4j."""
    for kind, count in (("movie", 3), ("person", 4), ("genre", 1)):
        assert re.search(rf"^{kind}\s+{count}\s+{count}$", ingested, re.M), ingested
    assert "STARRING 4" in ingested, ingested


@pytest.mark.parametrize("strategy", ["base", "graph"])
def test_searches_through_the_front_are_rewritten_with_each_callers_rights(
    strategy: str, stack: Stack, ingested: str, users: dict[str, str]
) -> None:
    reader = _search(stack.client("smoke-reader", users["smoke-reader"]), strategy)
    restricted = _search(stack.client("smoke-restricted", users["smoke-restricted"]), strategy)
    for answer in (reader, restricted):
        explain = answer.get("kgqr", {})
        assert explain and "passed_through" not in explain, json.dumps(answer)[:2000]
        assert explain.get("strategy") == strategy, explain
    reader_ids = [hit["_id"] for hit in reader["hits"]["hits"]]
    restricted_ids = [hit["_id"] for hit in restricted["hits"]["hits"]]
    assert reader_ids[0] == HIDDEN, reader_ids  # Heat is the bank robbers' film
    assert HIDDEN not in restricted_ids and restricted_ids, restricted_ids
    assert "Heat" not in json.dumps(restricted)


def test_kgqr_own_account_cannot_read_the_callers_documents(stack: Stack, ingested: str) -> None:
    """The stack's kgqr account is for bookkeeping: a search with it directly on the
    documents is refused by OpenSearch itself."""
    kgqr = stack.client("kgqr", stack.environment["KGQR_OPENSEARCH_PASSWORD"])
    with pytest.raises(TransportError) as refused:
        kgqr.search(index=f"kgqr-{KB}-documents", body=QUERY)
    assert refused.value.status_code == 403


def test_the_node_holds_no_key_that_signs_certificates(stack: Stack) -> None:
    """The CA's key (a node certificate signed with it joins the cluster) and the admin
    certificate's (it passes every role) were in the config volume the node mounts."""
    node = stack.container("opensearch")
    listed = stack.engine.run(["exec", node, "ls", "/usr/share/opensearch/config/certs"],
                              capture=True).stdout.split()  # fmt: skip
    assert sorted(listed) == ["node-key.pem", "node.pem", "root-ca.pem"], listed


def test_an_llm_strategy_reaches_the_llm_container_with_its_key(
    stack: Stack, ingested: str, users: dict[str, str]
) -> None:
    """hyde asks the LLM container (which answers only with the stack's key) for a
    hypothetical document: no fallback means the rewriter reached it."""
    answer = _search(stack.client("smoke-reader", users["smoke-reader"]), "hyde")
    explain = answer["kgqr"]
    assert explain["strategy"] == "hyde" and explain.get("fallback") is None, explain
    assert answer["hits"]["hits"][0]["_id"] == HIDDEN
