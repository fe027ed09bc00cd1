"""The nginx front's configuration, rendered from settings."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
from pydantic import SecretStr

from kgqr_core.settings import Settings
from kgqr_ops import nginx_front
from kgqr_ops.nginx_front import render_config
from query_rewriter.engine.caller import KNOWN_CREDENTIAL_HEADERS


def test_every_placeholder_is_filled(tmp_path: Path) -> None:
    config = render_config(
        Settings.of({"opensearch_url": "http://search.internal:9300"}), "0.0.0.0:9202",
        "127.0.0.1:9201", tmp_path, tmp_path / "status.sock",
    )  # fmt: skip
    assert not re.search(r"@[A-Z_]+@", config)
    assert "server search.internal:9300 max_fails=1 fail_timeout=10s;" in config
    assert "server 127.0.0.1:9201;" in config and "listen 0.0.0.0:9202;" in config
    assert f"pid {tmp_path}/front.pid;" in config
    assert f"listen unix:{tmp_path}/status.sock;" in config
    assert '~^\\|*$  "";' in config  # no credentials: a caller's own header, or none


def test_the_fronts_line_and_header_bounds_are_the_settings(tmp_path: Path) -> None:
    """nginx's 8 KB default refused what KGQR_MAX_INITIAL_LINE_BYTES and
    KGQR_MAX_HEADER_BYTES were set to take, and its refusals named 4096 and 8192."""
    raised = Settings.of({"max_initial_line_bytes": 16384, "max_header_bytes": 12288})
    config = render_config(raised, "127.0.0.1:9202", "127.0.0.1:9201", tmp_path,
                           tmp_path / "status.sock")  # fmt: skip
    assert "large_client_header_buffers 4 16384;" in config
    assert "An HTTP line is larger than 16384 bytes." in config
    assert "HTTP header is larger than 12288 bytes." in config
    assert "4096 bytes" not in config and "8192 bytes" not in config
    small = Settings.of({"max_initial_line_bytes": 300, "max_header_bytes": 300})
    config = render_config(small, "127.0.0.1:9202", "127.0.0.1:9201", tmp_path,
                           tmp_path / "status.sock")  # fmt: skip
    assert "large_client_header_buffers 4 1024;" in config  # nginx takes no less than 512


def test_callers_without_credentials_never_get_kgqrs_by_default(tmp_path: Path) -> None:
    settings = Settings.of({"opensearch_user": "admin", "opensearch_password": SecretStr("s3cret")})
    config = render_config(settings, "127.0.0.1:9202", "127.0.0.1:9201", tmp_path, tmp_path / "s")
    assert '~^\\|*$  "";' in config
    assert base64.b64encode(b"admin:s3cret").decode() not in config


def test_lending_kgqrs_account_to_anonymous_callers_is_an_opt_in(tmp_path: Path) -> None:
    settings = Settings.of(
        {
            "opensearch_user": "admin",
            "opensearch_password": SecretStr("s3cret"),
            "anonymous_uses_service_account": True,
            "proxy_credential_headers": "X-Api-Key",
        }
    )
    config = render_config(settings, "127.0.0.1:9202", "127.0.0.1:9201", tmp_path, tmp_path / "s")
    expected = "Basic " + base64.b64encode(b"admin:s3cret").decode()
    assert f'~^\\|*$  "{expected}";' in config
    # Lent only when none of the credential headers kgqr knows is sent, as kgqr lends it.
    keyed_on = re.search(r'map "([^"]*)" \$upstream_authorization', config)
    assert keyed_on is not None
    assert set(keyed_on.group(1).split("|")) == {
        f"$http_{name.replace('-', '_')}" for name in KNOWN_CREDENTIAL_HEADERS | {"x-api-key"}
    }


def _render(tmp_path: Path, **settings: object) -> str:
    return render_config(Settings(**settings), "a:1", "b:2", tmp_path, tmp_path / "s")  # type: ignore[arg-type]


def test_plain_http_opensearch_gets_no_tls_directives(tmp_path: Path) -> None:
    config = _render(tmp_path, opensearch_url="http://search:9200")
    assert "proxy_ssl" not in config and "default  http;" in config


def test_https_opensearch_is_checked_against_the_configured_ca(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    config = _render(tmp_path, opensearch_url="https://search.internal", opensearch_ca_certs=ca)
    assert (
        "server search.internal:443 max_fails=1 fail_timeout=10s;" in config
        and "default  https;" in config
    )
    assert "kgqr     http;" in config  # kgqr itself stays plain http on loopback
    assert "proxy_ssl_name search.internal;" in config and "proxy_ssl_verify on;" in config
    assert f"proxy_ssl_trusted_certificate {ca};" in config


def test_https_without_verification_needs_no_ca(tmp_path: Path) -> None:
    config = _render(tmp_path, opensearch_url="https://search:9200", opensearch_verify_certs=False)
    assert "proxy_ssl_verify off;" in config and "trusted_certificate" not in config


def test_a_url_the_front_cannot_forward_to_is_refused_with_a_reason(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must be a URL of scheme http or https"):
        _render(tmp_path, opensearch_url="unix:/run/opensearch.sock")


def test_every_node_is_an_upstream_and_only_searches_are_sent_again(tmp_path: Path) -> None:
    """A node that refuses the connection is skipped for any request (nothing was sent);
    a lost connection sends only a search on to the next node."""
    nodes = ["http://n1:9200", "http://n2:9200", "http://10.0.0.3:9201"]
    config = render_config(Settings.of({"opensearch_url": nodes[0]}), "a:1", "b:2", tmp_path,
                           tmp_path / "s", nodes)  # fmt: skip
    upstream = config[config.index("upstream opensearch {") : config.index("upstream kgqr")]
    assert [line.split()[1] for line in upstream.splitlines() if line.strip().startswith(
        "server ")] == ["n1:9200", "n2:9200", "10.0.0.3:9201"]  # fmt: skip
    searches = config[config.index('location ~ "^/([^/_][^/]*/)?_(search') :].split("}")[0]
    assert "proxy_next_upstream error timeout non_idempotent;" in searches
    # The engine's own 502-504 mark no node down: a caller can make it answer 503 (a
    # search of a red index), and each one took a node out of the front for everyone.
    assert "http_50" not in searches
    assert "client_max_body_size 100m;" in searches  # read to disk first: bounded
    location = re.compile(searches.split('"')[1])
    assert location.search("/idx/_search") and location.search("/_msearch/template")
    assert not location.search("/idx/_doc/_search")  # a write is never sent twice
    everything = config[config.index("location / {") :].split("}")[0]
    assert "proxy_next_upstream" not in everything


def test_an_attached_index_is_routed_to_kgqr_spelt_as_sent_or_percent_encoded() -> None:
    """The front matches the raw request URI: a client that encodes `+` as %2B (in either
    case) still reaches kgqr, and a longer name or another index does not."""
    from kgqr_ops.nginx_front import attached_routes

    line = attached_routes(["team+docs"]).strip()
    pattern = re.compile(line.split('"')[1].removeprefix("~"))
    for uri in (
        "/team+docs/_search",
        "/team%2Bdocs/_search",
        "/team%2bdocs",
        "/team+docs,x/_search",
    ):
        assert pattern.search(uri), uri
    for uri in ("/team+docsx/_search", "/other/_search", "/team%2Cdocs/_search"):
        assert not pattern.search(uri), uri


def test_the_front_follows_the_engines_nodes_and_tells_of_its_own_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nginx resolves its upstreams at a load: a node made again on another address (a
    container recreated) answered every pass-through 502; and an nginx that exited left
    the proxy running with no front, unnoticed."""
    import signal
    import threading

    from kgqr_ops import nginx_front

    # The engine answers, then cannot (its node is down: that names no node fewer).
    reported = iter([["https://opensearch:9200", "https://10.0.0.9:9200"], None])
    monkeypatch.setattr(nginx_front, "ROUTES_REFRESH_S", 0.01)
    monkeypatch.setattr(nginx_front, "attached_index_names", lambda settings: [])
    monkeypatch.setattr(nginx_front, "reported_node_urls", lambda settings: next(reported))
    (tmp_path / nginx_front.ROUTES_FILE).write_text(nginx_front.attached_routes([]))
    (tmp_path / "nginx.conf").write_text("upstream https://opensearch:9200 https://10.0.0.5:9200")

    class Nginx:
        polls, signals = 0, list[int]()

        def poll(self) -> int | None:
            self.polls += 1
            return None if self.polls <= 2 else 1

        def send_signal(self, sent: int) -> None:
            self.signals.append(sent)

        returncode = 1

    nginx, exits = Nginx(), list[int | None]()
    keeper = threading.Thread(target=nginx_front._keep_front, args=(
        Settings.of({}), tmp_path, nginx, threading.Event(),
        lambda run_dir, nodes: "upstream " + " ".join(nodes), exits.append))  # fmt: skip
    keeper.start()
    keeper.join(timeout=10)
    assert not keeper.is_alive() and exits == [1]
    assert (tmp_path / "nginx.conf").read_text() == (
        "upstream https://opensearch:9200 https://10.0.0.9:9200"
    )
    assert nginx.signals == [signal.SIGHUP]  # reloaded once: the second look learnt nothing


def test_the_fronts_config_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    """It may hold kgqr's own credentials, lent to anonymous callers."""
    config = tmp_path / "nginx.conf"
    config.write_text("older")
    config.chmod(0o644)
    nginx_front._write_config(config, "events {}")
    assert config.read_text() == "events {}" and config.stat().st_mode & 0o777 == 0o600
