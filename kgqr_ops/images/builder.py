"""Builds kgqr's images with the engine's layer cache, so only what changed is built again.

Each build stages its context (the installs `kgqr services up` assembles), then runs the
engine's build on top of the base image. An unchanged context and Dockerfile reuse every
cached layer, which takes seconds; the report says which images changed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from kgqr_core.settings import Settings
from kgqr_ops.images.base_image import BASE_TAG
from kgqr_ops.images.catalog import DOCKER_DIR, ImageSpec
from kgqr_ops.images.engine import ContainerEngine
from kgqr_ops.services.errors import ServiceError

BUILD_CA_PATH = "/run/kgqr-build-ca.crt"
CA_VARIABLES = ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")


@dataclass(frozen=True)
class BuiltImage:
    name: str
    tag: str
    image_id: str
    changed: bool
    seconds: float


def build_ca_bundle(environment: dict[str, str] | None = None) -> Path | None:
    """The CA bundle this machine's own pip trusts, when it names one: builds on a machine
    that reaches PyPI through a TLS-inspecting proxy need it too."""
    env = os.environ if environment is None else environment
    for name in CA_VARIABLES:
        value = env.get(name)
        if value and Path(value).is_file():
            return Path(value)
    return None


def build_arguments(
    engine: ContainerEngine, spec: ImageSpec, settings: Settings, context: Path,
    volumes: dict[Path, str], ca_bundle: Path | None,
) -> list[str]:  # fmt: skip
    """The engine's `build` arguments. Build-time volumes are podman's (docker's build has
    none): there the CA bundle and cached wheels are lent to the build, never copied in."""
    args = [
        "build", "--network", "host",
        "-f", str(DOCKER_DIR / spec.dockerfile),
        "-t", spec.tag(settings),
        "--build-arg", f"BASE_IMAGE={BASE_TAG}",
    ]  # fmt: skip
    if engine.is_podman:
        lent = dict(volumes)
        if ca_bundle is not None:
            lent[ca_bundle] = BUILD_CA_PATH
            args += ["--build-arg", f"PIP_CERT={BUILD_CA_PATH}"]
        for host, inside in lent.items():
            if host.exists():
                args += ["-v", f"{host}:{inside}:ro"]
    return [*args, str(context)]


def build_log(contexts_dir: Path, spec: ImageSpec) -> Path:
    """Where the engine's output of the last build of `spec` is kept."""
    return contexts_dir / f"{spec.name}.build.log"


def build_image(
    engine: ContainerEngine, spec: ImageSpec, settings: Settings, contexts_dir: Path
) -> BuiltImage:
    started = time.monotonic()
    tag = spec.tag(settings)
    before = engine.image_id(tag)
    context = spec.stage(settings, contexts_dir / spec.name)
    arguments = build_arguments(
        engine, spec, settings, context.directory, context.volumes, build_ca_bundle()
    )
    log = build_log(contexts_dir, spec)
    with log.open("w") as output:
        done = engine.run(arguments, output=output, check=False)
    if done.returncode != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
        raise ServiceError("images", f"building {tag} failed (whole log: {log}):\n{tail}")
    after = engine.image_id(tag) or ""
    return BuiltImage(spec.name, tag, after, after != before, time.monotonic() - started)
