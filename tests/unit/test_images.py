"""How kgqr builds its images: the mirror debootstrap uses, what a build is lent, and the
settings podman needs on these kernels."""

from __future__ import annotations

from pathlib import Path

from kgqr_core.settings import Settings
from kgqr_ops.images.base_image import DEFAULT_MIRROR, apt_sources, debian_mirror
from kgqr_ops.images.builder import BUILD_CA_PATH, build_arguments, build_ca_bundle
from kgqr_ops.images.catalog import DOCKER_DIR, IMAGES
from kgqr_ops.images.engine import PODMAN_CONF, ContainerEngine


def test_the_mirror_is_apts_own_in_either_sources_style(tmp_path: Path) -> None:
    one_line = tmp_path / "sources.list"
    one_line.write_text(
        "# deb http://ignored.example/debian bookworm main\n"
        "deb [arch=amd64] http://mirror.example/debian/ bookworm main\n"
    )
    deb822 = tmp_path / "debian.sources"
    deb822.write_text(
        "Types: deb\nURIs: http://security.example/debian-security\n\n"
        "Types: deb\nURIs: http://other.example/debian\n"
    )
    assert debian_mirror([one_line, deb822]) == "http://mirror.example/debian"
    assert debian_mirror([deb822]) == "http://other.example/debian"
    assert debian_mirror([tmp_path / "missing"]) == DEFAULT_MIRROR
    security = debian_mirror([one_line, deb822], archive="debian-security")
    assert security == "http://security.example/debian-security"
    missing = debian_mirror([one_line], archive="debian-security")
    assert missing == "http://deb.debian.org/debian-security"


def test_the_base_takes_debians_security_and_stable_updates() -> None:
    """debootstrap writes the release's source alone: every image's packages were the
    point release's, behind Debian's security fixes, however often the base was made."""
    sources = apt_sources("http://mirror.example/debian", "http://sec.example/debian-security")
    assert sources.splitlines() == [
        "deb http://mirror.example/debian bookworm main",
        "deb http://mirror.example/debian bookworm-updates main",
        "deb http://sec.example/debian-security bookworm-security main",
    ]


def test_podman_gets_kgqrs_settings_file(tmp_path: Path) -> None:
    engine = ContainerEngine("/usr/bin/podman", tmp_path)
    environment = engine.environment()
    assert Path(environment["CONTAINERS_CONF"]).read_text() == PODMAN_CONF
    assert 'runtime = "runc"' in PODMAN_CONF and 'cgroup_manager = "cgroupfs"' in PODMAN_CONF
    assert ContainerEngine("/usr/bin/docker", tmp_path).environment() == {}


def test_the_ca_bundle_and_wheels_are_lent_to_a_podman_build_never_copied(
    tmp_path: Path,
) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("pem")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    spec = IMAGES["llm"]
    podman = ContainerEngine("/usr/bin/podman", tmp_path)
    args = build_arguments(podman, spec, Settings(), tmp_path, {wheels: "/wheels"}, ca)
    assert args[:3] == ["build", "--network", "host"]
    assert f"{ca}:{BUILD_CA_PATH}:ro" in args and f"{wheels}:/wheels:ro" in args
    assert f"PIP_CERT={BUILD_CA_PATH}" in args
    assert args[args.index("-f") + 1] == str(DOCKER_DIR / "llm.Dockerfile")
    assert args[-1] == str(tmp_path)
    absent = build_arguments(podman, spec, Settings(), tmp_path, {tmp_path / "no": "/wheels"}, None)
    assert "-v" not in absent and not any("PIP_CERT" in a for a in absent)
    docker = ContainerEngine("/usr/bin/docker", tmp_path)
    assert "-v" not in build_arguments(docker, spec, Settings(), tmp_path, {wheels: "/w"}, ca)


def test_the_ca_bundle_is_the_one_pip_here_trusts(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle.pem"
    bundle.write_text("pem")
    assert (
        build_ca_bundle({"PIP_CERT": str(tmp_path / "gone"), "SSL_CERT_FILE": str(bundle)})
        == bundle
    )
    assert build_ca_bundle({}) is None


def test_every_image_has_its_dockerfile_on_the_debootstrapped_base() -> None:
    for spec in IMAGES.values():
        text = (DOCKER_DIR / spec.dockerfile).read_text()
        assert "ARG BASE_IMAGE=localhost/kgqr-debian:bookworm" in text, spec.name
        assert "FROM ${BASE_IMAGE}" in text, spec.name
        assert "\nUSER " in text, f"{spec.name} runs as root"
