"""Artifacts from Maven Central through Maven itself, cached on disk."""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from kgqr_ops.services.errors import ServiceError
from kgqr_ops.services.process import run_checked


@dataclass(frozen=True)
class MavenArtifact:
    group: str
    artifact: str
    version: str
    extension: str = "zip"
    sha256: str | None = None  # pinned where Maven Central publishes no checksum file

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.{self.extension}"

    def __str__(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}@{self.extension}"


def fetch(artifact: MavenArtifact, download_dir: Path, local_repo: Path, service: str) -> Path:
    """The artifact's local path, fetched once by Maven (which checks the published sha1)
    and, where a sha256 is pinned, checked against that too."""
    target = download_dir / artifact.file_name
    if target.is_file():
        return target
    _require_mvn(service)
    download_dir.mkdir(parents=True, exist_ok=True)
    # Strict checksums fail where the publisher uploaded none; a pinned sha256 stands in.
    strict = ["--strict-checksums"] if artifact.sha256 is None else []
    coordinates = f"{artifact.group}:{artifact.artifact}:{artifact.version}:{artifact.extension}"
    try:
        run_checked(
            service,
            ["mvn", "-q", "-B", f"-Dmaven.repo.local={local_repo}", *strict, "dependency:copy",
             f"-Dartifact={coordinates}", f"-DoutputDirectory={download_dir}"],
            cwd=download_dir,
        )  # fmt: skip
    except ServiceError as exc:
        raise ServiceError(
            service, f"could not fetch {artifact} from Maven Central: {exc}"
        ) from exc
    if artifact.sha256 is not None and _sha256(target) != artifact.sha256:
        actual = _sha256(target)
        target.unlink()
        raise ServiceError(
            service, f"{artifact}: sha256 {actual} does not match the pinned {artifact.sha256}"
        )
    return target


def resolve_jars(
    pom: Path, properties: dict[str, str], output_dir: Path, local_repo: Path, service: str
) -> list[Path]:
    """Every runtime jar the pom's dependencies need, copied into output_dir (once)."""
    marker = output_dir / ".resolved"
    if not marker.is_file():
        _require_mvn(service)
        output_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            "mvn", "-q", "-B", "-f", str(pom), f"-Dmaven.repo.local={local_repo}",
            *(f"-D{key}={value}" for key, value in properties.items()),
            "dependency:copy-dependencies", f"-DoutputDirectory={output_dir}",
            "-DincludeScope=runtime",
        ]  # fmt: skip
        run_checked(service, argv)
        marker.write_text("ok\n")
    return sorted(output_dir.glob("*.jar"))


def _require_mvn(service: str) -> None:
    if shutil.which("mvn") is None:
        raise ServiceError(service, "Maven (mvn) is needed to fetch from Maven Central; install it")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
