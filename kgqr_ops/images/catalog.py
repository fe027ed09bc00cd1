"""kgqr's images: the Dockerfile each is built from, its tag, and the context it is built in.

The stores' images hold what `kgqr services up` assembles from Maven Central, the OS packages
and PyPI (the same code prepares both), so a container runs exactly what the local
services and the test suite run. Tags are derived from the settings' versions;
docker/compose.yml names the default ones.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from kgqr_core.settings import Settings
from kgqr_ops.services.errors import ServiceError
from kgqr_ops.services.llm_server import LlmServer
from kgqr_ops.services.neo4j_server import Neo4jServer
from kgqr_ops.services.secured_opensearch import SecuredOpenSearchNode

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = REPO_ROOT / "docker"


@dataclass(frozen=True)
class BuildContext:
    """The folder an image is built in, and host folders lent to the build only (never a
    layer): `host path -> path in the build`."""

    directory: Path
    volumes: dict[Path, str] = field(default_factory=dict)


Stager = Callable[[Settings, Path], BuildContext]


@dataclass(frozen=True)
class ImageSpec:
    name: str
    dockerfile: str
    tag_of: Callable[[Settings], str]
    stage: Stager
    about: str

    def tag(self, settings: Settings) -> str:
        return self.tag_of(settings)


def _fresh(directory: Path) -> Path:
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    return directory


def _link_or_copy(source: str | Path, target: str | Path) -> None:
    """A hard link where the disk allows (the OpenSearch install is 125 MB, the model
    1.1 GB), a copy elsewhere."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _mirror(source: Path, target: Path) -> None:
    """An exact copy of the folder `source` at `target`, file by file linked or copied."""
    shutil.copytree(source, target, copy_function=_link_or_copy, symlinks=True)


def _package_dir(package: str) -> Path:
    return Path(str(resources.files(package)))


def stage_opensearch(settings: Settings, directory: Path) -> BuildContext:
    install = SecuredOpenSearchNode(settings).install()
    context = _fresh(directory)
    _mirror(install, context / "opensearch")
    security = _package_dir("plugin.opensearch.security")
    (context / "security").mkdir()
    for name in ("configure.sh", "kgqr-roles.yml"):
        shutil.copy2(security / name, context / "security" / name)
    shutil.copy2(DOCKER_DIR / "opensearch-entrypoint.sh", context / "opensearch-entrypoint.sh")
    return BuildContext(context)


def stage_neo4j(settings: Settings, directory: Path) -> BuildContext:
    server = Neo4jServer(settings)
    server.prepare()
    context = _fresh(directory)
    _mirror(server.install_dir / "lib", context / "neo4j" / "lib")
    _mirror(server.classes_dir(), context / "neo4j" / "classes")
    return BuildContext(context)


def stage_nothing(settings: Settings, directory: Path) -> BuildContext:
    return BuildContext(_fresh(directory))


def stage_llm(settings: Settings, directory: Path) -> BuildContext:
    server = LlmServer(settings)
    server.prepare()  # the model, and llama-cpp-python's wheel the image installs
    context = _fresh(directory)
    _link_or_copy(server.gguf(), context / "model.gguf")
    return BuildContext(context, {server.layout.wheels: "/wheels"})


def stage_checkout(settings: Settings, directory: Path) -> BuildContext:
    """kgqr's own image is built from the checkout (`.dockerignore` keeps it small)."""
    if not (REPO_ROOT / "pyproject.toml").is_file():
        raise ServiceError("images", "kgqr's image is built from a checkout of kgqr")
    return BuildContext(REPO_ROOT)


IMAGES: dict[str, ImageSpec] = {
    spec.name: spec
    for spec in [
        ImageSpec(
            "opensearch",
            "opensearch.Dockerfile",
            lambda s: f"localhost/kgqr-opensearch:{s.opensearch.version}",
            stage_opensearch,
            "OpenSearch with k-NN, neural-search, security and kgqr's engine guard",
        ),
        ImageSpec(
            "neo4j",
            "neo4j.Dockerfile",
            lambda s: f"localhost/kgqr-neo4j:{s.neo4j.version}",
            stage_neo4j,
            "Neo4j's embedded kernel and Bolt, with kgqr's procedures",
        ),
        ImageSpec(
            "redis",
            "redis.Dockerfile",
            lambda s: "localhost/kgqr-redis:bookworm",
            stage_nothing,
            "Redis from Debian's packages",
        ),
        ImageSpec(
            "kgqr",
            "Dockerfile",
            lambda s: "localhost/kgqr:latest",
            stage_checkout,
            "the rewriter with its nginx front, and the ingest worker",
        ),
        ImageSpec(
            "llm",
            "llm.Dockerfile",
            lambda s: "localhost/kgqr-llm:latest",
            stage_llm,
            "llama-cpp-python's server with the packaged GGUF model",
        ),
    ]
}
