"""The test suite's services in testcontainers, from the images `kgqr images build` makes.

No registry can be reached where kgqr is tested, so the containers run kgqr's own images:
the same OpenSearch install, Neo4j with kgqr's procedures and Redis as `kgqr services up`.
With podman, testcontainers talks to podman's Docker-API socket (`kgqr images env`); the
reaper image cannot be pulled, so containers are stopped by the `with` blocks here.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import ssl
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kgqr_core.settings import Settings, get_settings
from kgqr_ops.images.catalog import IMAGES
from kgqr_ops.images.engine import container_engine
from kgqr_ops.services.http_probe import request_json
from kgqr_ops.services.secured_opensearch import SecuredCredentials, SecuredOpenSearchNode

STARTUP_S = 240
CA_IN_IMAGE = "/usr/share/opensearch/config/certs/root-ca.pem"


def use_container_engine(settings: Settings) -> None:
    """Point testcontainers at the engine kgqr builds with (podman's socket here)."""
    engine = container_engine(settings)
    os.environ.update(engine.environment())
    os.environ.setdefault("DOCKER_HOST", f"unix://{engine.api_socket()}")
    if engine.is_podman:
        os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
        os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")
        os.environ.setdefault("TC_HOST", "127.0.0.1")


def _image(settings: Settings, name: str) -> str:
    return IMAGES[name].tag(settings)


def _logged(message: str) -> Any:
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    return LogMessageWaitStrategy(message).with_startup_timeout(STARTUP_S)


def _address(container: Any, port: int) -> str:
    return f"{container.get_container_host_ip()}:{container.get_exposed_port(port)}"


@contextlib.contextmanager
def store_containers(settings: Settings) -> Iterator[Settings]:
    """OpenSearch (security plugin off, as the plain local node), Neo4j and Redis (with a
    password, as kgqr always runs it); yields settings pointing at them, exported to the
    environment too, since proxies and workers the tests start read it."""
    from testcontainers.core.container import DockerContainer

    redis_password = secrets.token_urlsafe(16)
    with contextlib.ExitStack() as stack:
        opensearch = stack.enter_context(
            DockerContainer(_image(settings, "opensearch"))
            .with_env("discovery.type", "single-node")
            .with_env("DISABLE_SECURITY_PLUGIN", "true")
            .with_env("OPENSEARCH_JAVA_OPTS", "-Xms1g -Xmx1g")
            .with_exposed_ports(9200)
            .waiting_for(_logged("started"))
        )
        neo4j = stack.enter_context(
            DockerContainer(_image(settings, "neo4j"))
            .with_exposed_ports(7687)
            .waiting_for(_logged("kgqr-neo4j ready"))
        )
        redis = stack.enter_context(
            DockerContainer(_image(settings, "redis"))
            .with_env("REDIS_PASSWORD", redis_password)
            .with_command(
                [
                    "sh",
                    "-c",
                    'printf \'requirepass "%s"\\n\' "$REDIS_PASSWORD" > /tmp/r.conf'
                    " && exec redis-server /tmp/r.conf --save '' --appendonly no",
                ]
            )
            .with_exposed_ports(6379)
            .waiting_for(_logged("Ready to accept connections"))
        )
        overrides = {
            "opensearch_url": f"http://{_address(opensearch, 9200)}",
            "neo4j_uri": f"bolt://{_address(neo4j, 7687)}",
            "redis_url": f"redis://{_address(redis, 6379)}/0",
            "cache_redis_url": f"redis://{_address(redis, 6379)}/1",
            "redis_password": redis_password,
        }
        for key, value in overrides.items():
            os.environ[f"KGQR_{key.upper()}"] = value
        yield _reread_settings()


def _reread_settings() -> Settings:
    """Settings with the overrides just exported, as the services under test read them;
    the process's own settings and its Celery app (made at import, before any container
    ran) are pointed at the containers too, so jobs go where the tests' workers listen."""
    from ingest.celery_app import app

    get_settings.cache_clear()
    settings = get_settings()
    app.conf.broker_url = app.conf.result_backend = settings.redis.url
    return Settings()


@contextlib.contextmanager
def secured_container(settings: Settings) -> Iterator[SecuredCredentials]:
    """The secured node in a container: kgqr's OpenSearch image configured at start by the
    same configure.sh (TLS made with openssl, kgqr's roles, these passwords), with the
    local secured node's own options (CORS for one origin, impersonation)."""
    from testcontainers.core.container import DockerContainer

    passwords = {role: secrets.token_urlsafe(12) + "Aa1!" for role in
                 ("admin", "kgqr", "ingest", "dashboards")}  # fmt: skip
    container = (
        DockerContainer(_image(settings, "opensearch"))
        .with_env("discovery.type", "single-node")
        .with_env("OPENSEARCH_JAVA_OPTS", "-Xms1g -Xmx1g")
        .with_env("KGQR_SECURITY_HOSTS", "localhost")
        .with_exposed_ports(9200)
    )
    for role, password in passwords.items():
        container = container.with_env(f"KGQR_SECURITY_{role.upper()}_PASSWORD", password)
    for name, value in _secured_node_settings(settings).items():
        container = container.with_env(name, value)
    with container, tempfile.TemporaryDirectory(prefix="kgqr-secured-ca-") as scratch:
        ca_file = Path(scratch) / "root-ca.pem"
        credentials = SecuredCredentials(
            admin_password=passwords["admin"],
            kgqr_password=passwords["kgqr"],
            ingest_password=passwords["ingest"],
            dashboards_password=passwords["dashboards"],
            ca_file=ca_file,
            url=f"https://localhost:{container.get_exposed_port(9200)}",
        )
        _until_secured_answers(container, credentials)
        yield credentials


def _secured_node_settings(settings: Settings) -> dict[str, str]:
    """The local secured node's `-E` options, but its transport port, as variables."""
    options = SecuredOpenSearchNode(settings).node_options()
    pairs = (option.split("=", 1) for option in options[1::2])
    return {name: value for name, value in pairs if name != "transport.port"}


def _until_secured_answers(container: Any, credentials: SecuredCredentials) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if not credentials.ca_file.is_file():
            _copy_out(container, CA_IN_IMAGE, credentials.ca_file)
        if credentials.ca_file.is_file():
            health = request_json(
                "GET", f"{credentials.url}/_cluster/health",
                headers={"Authorization": credentials.admin_authorization},
                context=ssl.create_default_context(cafile=str(credentials.ca_file)),
                timeout_s=3.0,
            )  # fmt: skip
            if health and health.get("status") in ("green", "yellow"):
                return
        time.sleep(2)
    logs = container.get_logs()[0].decode(errors="replace")[-4000:]
    raise RuntimeError(f"the secured OpenSearch container never answered:\n{logs}")


def _copy_out(container: Any, path: str, target: Path) -> None:
    """One file out of the container (absent until configure.sh has made it)."""
    try:
        chunks, _ = container.get_wrapped_container().get_archive(path)
    except Exception:  # the docker SDK's NotFound while the certificate is not made yet
        return
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as archive:
        member = archive.extractfile(Path(path).name)
        if member is not None:
            target.write_bytes(member.read())
