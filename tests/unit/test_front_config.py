"""The nginx front's configuration, rendered from settings."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
from pydantic import SecretStr

from plugin.services.errors import ServiceError
from plugin.settings import Settings
from query_rewriter.front import render_config


def test_every_placeholder_is_filled(tmp_path: Path) -> None:
    config = render_config(
        Settings(opensearch_url="http://search.internal:9300"), "0.0.0.0:9202", "127.0.0.1:9201",
        tmp_path, tmp_path / "status.sock",
    )  # fmt: skip
    assert not re.search(r"@[A-Z_]+@", config)
    assert "server search.internal:9300;" in config
    assert "server 127.0.0.1:9201;" in config and "listen 0.0.0.0:9202;" in config
    assert f"pid {tmp_path}/front.pid;" in config
    assert f"listen unix:{tmp_path}/status.sock;" in config
    assert '""       "";' in config  # no credentials: a caller's own header, or none


def test_callers_without_credentials_get_kgqrs(tmp_path: Path) -> None:
    settings = Settings(opensearch_user="admin", opensearch_password=SecretStr("s3cret"))
    config = render_config(settings, "127.0.0.1:9202", "127.0.0.1:9201", tmp_path, tmp_path / "s")
    expected = "Basic " + base64.b64encode(b"admin:s3cret").decode()
    assert f'""       "{expected}";' in config


def test_https_opensearch_is_refused_with_a_reason(tmp_path: Path) -> None:
    with pytest.raises(ServiceError, match="plain-http"):
        render_config(
            Settings(opensearch_url="https://search:9200"), "a:1", "b:2", tmp_path, tmp_path / "s"
        )
