"""Unpacking zips with their Unix file modes (zipfile alone drops the exec bits)."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path


def extract_zip(archive: Path, destination: Path) -> Path:
    """Extract archive into destination; returns the single top-level folder it held."""
    destination.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(archive) as bundle:
        for member in bundle.infolist():
            target = bundle.extract(member, destination)
            mode = (member.external_attr >> 16) & 0o777
            if mode:
                Path(target).chmod(mode)
        tops = {name.split("/", 1)[0] for name in bundle.namelist()}
    if len(tops) != 1:
        raise ValueError(f"{archive} does not hold exactly one top-level folder: {sorted(tops)}")
    return destination / tops.pop()


def replace_dir(source: Path, target: Path) -> None:
    """Move a freshly built folder into place, dropping any half-built previous one."""
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    source.rename(target)
