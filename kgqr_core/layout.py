"""Where the local services keep downloads, builds, data, logs and pid files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ServiceLayout:
    """Folders under ``Settings.home``; nothing here lives inside the repository."""

    home: Path

    @property
    def root(self) -> Path:
        return self.home / "services"

    @property
    def downloads(self) -> Path:
        return self.root / "downloads"

    @property
    def maven_repo(self) -> Path:
        return self.root / "m2"

    @property
    def installs(self) -> Path:
        return self.root / "installs"

    @property
    def model_parts(self) -> Path:
        return self.root / "model-parts"

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def wheels(self) -> Path:
        return self.root / "wheels"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def run(self) -> Path:
        return self.root / "run"

    def data(self, service: str) -> Path:
        return self.root / "data" / service
