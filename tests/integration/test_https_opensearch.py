"""kgqr in front of an https OpenSearch (a security-plugin cluster, as most deployments
run). The node here speaks plain http, so a TLS-terminating nginx with a certificate made
for the test stands in front of it; every path kgqr reaches OpenSearch by is checked."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
from opensearchpy import OpenSearch
from opensearchpy.exceptions import ConnectionError as OpenSearchConnectionError
from urllib3.exceptions import InsecureRequestWarning

from kgqr_core import connections
from kgqr_core.settings import Settings
from kgqr_ops.background_proxy import free_port, running_proxy
from kgqr_ops.nginx_front import running_front, running_nginx
from kgqr_ops.services.local_service import port_of
from plugin import schema
from tests.integration.ingest_helpers import TINY_KB, ingested

QUERY = {"query": {"match": {"text": "professional bank robbers chased by the police"}}}


def _tls_terminator_config(run_dir: Path, port: int, upstream: str) -> str:
    return f"""
worker_processes 1;
daemon off;
pid {run_dir}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {run_dir}/client_body;
  proxy_temp_path {run_dir}/proxy;
  fastcgi_temp_path {run_dir}/fastcgi;
  uwsgi_temp_path {run_dir}/uwsgi;
  scgi_temp_path {run_dir}/scgi;
  server {{
    listen 127.0.0.1:{port} ssl;
    ssl_certificate {run_dir}/cert.pem;
    ssl_certificate_key {run_dir}/key.pem;
    location / {{
      proxy_pass http://{upstream};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}
}}
"""


def _self_signed_certificate(run_dir: Path) -> None:
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(run_dir / "key.pem"), "-out", str(run_dir / "cert.pem")],
        check=True, capture_output=True,
    )  # fmt: skip


@pytest.fixture(scope="module")
def https_settings(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    """Settings for the https address, trusting the test certificate (copied out of nginx's
    run dir, which only exists while nginx runs)."""
    port, upstream = free_port(), urlparse(settings.opensearch.url).netloc
    ca = tmp_path_factory.mktemp("tls") / "ca.pem"

    def config(run_dir: Path) -> str:
        _self_signed_certificate(run_dir)
        ca.write_bytes((run_dir / "cert.pem").read_bytes())
        return _tls_terminator_config(run_dir, port, upstream)

    with running_nginx(config, "127.0.0.1", port):
        yield settings.replaced(
            {"opensearch_url": f"https://localhost:{port}", "opensearch_ca_certs": ca}
        )


@pytest.fixture(scope="module")
def managed_index(settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any,
                  ingest_worker: Any) -> Iterator[str]:  # fmt: skip
    with ingested(settings, opensearch, neo4j_driver, redis_client, TINY_KB, "https-movies") as kb:
        yield schema.documents_index(kb)


def test_clients_check_the_certificate_against_the_configured_ca(https_settings: Settings) -> None:
    assert connections.opensearch_client(https_settings).info()["version"]["number"]
    system_cas_only = https_settings.replaced({"opensearch_ca_certs": None})
    with pytest.raises(OpenSearchConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        connections.opensearch_client(system_cas_only).info()
    unchecked = system_cas_only.replaced({"opensearch_verify_certs": False})
    with pytest.warns(InsecureRequestWarning):  # said out loud, every request
        assert connections.opensearch_client(unchecked).cluster.health()["status"]


@contextmanager
def _entry(settings: Settings, entry: str) -> Iterator[str]:
    """Where clients point: `kgqr serve` itself, or the nginx front before it."""
    with running_proxy(settings) as proxy_url:
        if entry == "kgqr":
            yield proxy_url
            return
        with running_front(settings, "127.0.0.1", free_port(), port_of(proxy_url, 0)) as url:
            yield url


@pytest.mark.parametrize("entry", ["kgqr", "front"])
def test_proxy_and_front_forward_and_rewrite_over_https(
    https_settings: Settings, managed_index: str, entry: str
) -> None:
    with _entry(https_settings, entry) as url:
        client = OpenSearch(hosts=[url], timeout=120)
        assert client.cluster.health()["status"] in ("green", "yellow")  # passed straight through
        assert client.count(index=managed_index)["count"] > 0
        response = httpx.post(
            f"{url}/{managed_index}/_search", json=QUERY, params={"kgqr.explain": "true"},
            timeout=120,
        ).json()  # fmt: skip
    assert response["hits"]["hits"], response  # kgqr's own searches went over https too
    assert response["kgqr"]["fallback"] is None, response["kgqr"]


@pytest.mark.parametrize("entry", ["kgqr", "front"])
def test_an_untrusted_certificate_is_a_bad_gateway_not_a_silent_downgrade(
    https_settings: Settings, entry: str
) -> None:
    untrusted = https_settings.replaced({"opensearch_ca_certs": None})
    with _entry(untrusted, entry) as url:
        response = httpx.get(f"{url}/_cluster/health", timeout=30)
    assert response.status_code == 502
    if entry == "kgqr":  # nginx answers with its own page; kgqr says why, naming no address
        reason = response.json()["error"]["reason"]
        assert "certificate" in reason.lower()
        netloc = urlparse(https_settings.opensearch.url).netloc
        assert netloc not in reason and netloc.split(":")[0] not in reason
