"""docker/compose.yml's structure: what the compose smoke test (tests/containers) cannot
see by running it, such as secrets kept off command lines and images named as built."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kgqr_core.settings import FLAT, Settings

DOCKER_DIR = Path(__file__).resolve().parents[2] / "docker"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((DOCKER_DIR / "compose.yml").read_text())


def test_declares_every_part_of_kgqr(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == {
        "opensearch-security", "opensearch", "opensearch-roles", "neo4j", "redis", "rewriter",
        "worker", "llm",
    }  # fmt: skip
    assert compose["services"]["llm"]["profiles"] == ["llm"]


def test_every_image_is_one_kgqr_images_build_makes(compose: dict[str, Any]) -> None:
    """Each service runs a locally built image by default (no registry is reachable where
    kgqr is built), overridable by a variable; the tags follow the local services' versions."""
    from kgqr_ops.images.catalog import IMAGES

    built = {spec.tag(Settings()) for spec in IMAGES.values()}
    for name, service in compose["services"].items():
        image = re.fullmatch(r"\$\{KGQR_\w*IMAGE:-([^}]+)\}", service["image"])
        assert image, f"{name}: {service['image']}"
        assert image.group(1) in built, name
        assert "build" not in service, name


def test_dependencies_exist_and_wait_for_health(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, service in services.items():
        for dependency, condition in service.get("depends_on", {}).items():
            assert dependency in services, f"{name} depends on undefined {dependency}"
            if condition["condition"] == "service_completed_successfully":
                assert "entrypoint" in services[dependency], f"{dependency} is no one-shot"
                continue
            assert condition["condition"] == "service_healthy"
            assert "healthcheck" in services[dependency], f"{dependency} has no healthcheck"


def test_kgqr_containers_are_configured_through_real_settings(compose: dict[str, Any]) -> None:
    fields = {name.upper() for name in FLAT}
    for name in ("rewriter", "worker"):
        environment = compose["services"][name]["environment"]
        for variable in environment:
            assert variable.startswith("KGQR_") and variable[5:] in fields, variable
        assert environment["KGQR_OPENSEARCH_URL"] == "https://opensearch:9200"


def test_entry_points_exist(compose: dict[str, Any]) -> None:
    worker_command = compose["services"]["worker"]["command"]
    app_module = worker_command[worker_command.index("-A") + 1]
    assert hasattr(importlib.import_module(app_module), "app")
    from kgqr_ops.cli import SUBCOMMANDS

    rewriter = compose["services"]["rewriter"]["command"]
    assert rewriter[0] == "kgqr" and rewriter[1] in SUBCOMMANDS
    roles = compose["services"]["opensearch-roles"]["entrypoint"]
    assert roles[0] == "kgqr" and roles[1] in SUBCOMMANDS


def test_named_volumes_are_declared(compose: dict[str, Any]) -> None:
    declared = set(compose["volumes"])
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if not source.startswith((".", "/")):
                assert source in declared


def test_opensearch_runs_secured_with_passwords_only_from_the_environment(
    compose: dict[str, Any],
) -> None:
    """No default password anywhere: each comes from the environment or compose refuses to
    start (`${VAR:?...}`); the security plugin is on and configured by kgqr's own script,
    never the demo configuration."""

    services = compose["services"]
    text = (DOCKER_DIR / "compose.yml").read_text()
    assert "DISABLE_SECURITY_PLUGIN" not in text
    passwords = [
        value
        for service in services.values()
        for name, value in (service.get("environment") or {}).items()
        if "PASSWORD" in name or name == "NEO4J_AUTH"
    ]
    assert len(passwords) >= 9
    assert all(re.search(r"\$\{[A-Z0-9_]+:\?", value) for value in passwords), passwords
    init = services["opensearch-security"]
    assert init["entrypoint"] == ["bash", "/kgqr-security/configure.sh"]
    assert (
        "COPY --chown=1000:1000 security/ /kgqr-security/"
        in (DOCKER_DIR / "opensearch.Dockerfile").read_text()
    )
    assert services["worker"]["environment"]["KGQR_OPENSEARCH_USER"] == "kgqr-ingest"
    # The keys that sign certificates or pass every role: kept where only the one-shot
    # that made them looks (the config volume is every node's).
    keys = [
        name
        for name, service in services.items()
        if any(v.split(":")[0] == "opensearch-keys" for v in service.get("volumes", []))
    ]
    assert keys == ["opensearch-security"]
    assert init["environment"]["KGQR_SECURITY_KEYS_OUT"] == "/opensearch-keys"
    # kgqr's roles put at every start (the config volume's reach the node once only).
    roles = services["opensearch-roles"]
    assert roles["entrypoint"][:3] == ["kgqr", "plugin", "roles"]
    assert "--wait" in roles["entrypoint"]  # podman 4.3 starts it before the node is up
    assert roles["environment"]["KGQR_OPENSEARCH_USER"] == "admin"
    assert services["rewriter"]["environment"]["KGQR_OPENSEARCH_USER"] == "kgqr"


def test_the_image_copies_every_package_kgqr_installs() -> None:
    import tomllib

    pyproject = tomllib.loads((DOCKER_DIR.parent / "pyproject.toml").read_text())
    packages = [
        p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    ]
    dockerfile = (DOCKER_DIR / "Dockerfile").read_text()
    for package in packages:
        assert f"COPY {package} ./{package}" in dockerfile, package


def test_redis_and_the_llm_are_on_the_compose_network_only_and_need_their_secret(
    compose: dict[str, Any],
) -> None:
    """Whoever reached Redis could queue ingest tasks writing any KB as kgqr-ingest, or
    poison the caches; the LLM answered anyone. Neither is published, and both ask for
    the secret kgqr's containers send."""
    services = compose["services"]
    for name in ("redis", "llm"):
        assert "ports" not in services[name], name
    assert "${KGQR_REDIS_PASSWORD:?" in services["redis"]["environment"]["REDIS_PASSWORD"]
    assert "requirepass" in " ".join(services["redis"]["command"])
    # Required, as every password: a default key (`sk-local-no-key`) was a known one.
    assert services["llm"]["environment"]["API_KEY"].startswith("${KGQR_LLM_API_KEY:?")
    assert services["rewriter"]["environment"]["KGQR_LLM_API_KEY"].startswith(
        "${KGQR_LLM_API_KEY:?"
    )
    for name in ("rewriter", "worker"):
        assert services[name]["environment"]["KGQR_REDIS_PASSWORD"].startswith("${KGQR_REDIS")


def test_no_secret_is_put_on_a_command_line(compose: dict[str, Any]) -> None:
    """Arguments are in every host user's `ps`: a secret is referred to by its variable
    inside a shell (expanded by the shell's own printf into a pipe or a file), never
    written into a command's arguments."""

    for name, service in compose["services"].items():
        commands = [service.get("command") or [], service.get("entrypoint") or []]
        commands.append((service.get("healthcheck") or {}).get("test") or [])
        for argv in commands:
            text = " ".join(argv) if isinstance(argv, list) else argv
            # Compose expands ${...} into the arguments themselves.
            assert not re.search(r"\$\{\w*(?:PASSWORD|AUTH|KEY)", text), (name, text)
            for secret in re.findall(r"\$\$(\w*(?:PASSWORD|AUTH|KEY)\w*)", text):
                assert re.search(rf"printf [^|>]*\"\$\${secret}\" *[|>]", text), (name, text)
    script = (DOCKER_DIR.parent / "plugin/opensearch/security/configure.sh").read_text()
    assert 'hash.sh" -p' not in script and "-env" in script


def test_the_long_running_services_are_started_again_when_they_exit(
    compose: dict[str, Any],
) -> None:
    """The rewriter's nginx exits on an upstream name the network's DNS does not answer
    yet; without a restart policy the stack stayed down."""
    for name in ("rewriter", "worker"):
        assert compose["services"][name].get("restart") == "unless-stopped", name


def test_the_node_holds_no_password_and_the_health_checks_reach_what_they_name(
    compose: dict[str, Any],
) -> None:
    """The node held the admin's password for its health check (shown by `inspect`);
    the rewriter's check opened a port nginx held while the proxy loaded, or had gone."""
    services = compose["services"]
    node = services["opensearch"]
    assert not [name for name in node.get("environment", {}) if "PASSWORD" in name]
    assert "= 401" in " ".join(node["healthcheck"]["test"])  # security up, asking a sign-in
    assert "/_kgqr/" in " ".join(services["rewriter"]["healthcheck"]["test"])
    for name in ("opensearch", "neo4j"):  # time to close shards, to checkpoint
        assert services[name].get("stop_grace_period") == "60s", name
