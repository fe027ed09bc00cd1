"""An unprivileged account for services that refuse to run as root (OpenSearch does)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

from kgqr_ops.services.errors import ServiceError

SERVICE_USER = "kgqr"
# Root's home is closed to other users, so what the service user must read or write lives here.
UNPRIVILEGED_ROOT = Path("/var/lib/kgqr")


def running_as_root() -> bool:
    return os.geteuid() == 0


def ensure_service_user() -> str:
    """Create the system account once; returns its name."""
    try:
        pwd.getpwnam(SERVICE_USER)
    except KeyError:
        useradd = shutil.which("useradd")
        if useradd is None:
            raise ServiceError("opensearch", "running as root and `useradd` is missing") from None
        subprocess.run(
            [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
             SERVICE_USER],
            check=True,
        )  # fmt: skip
    return SERVICE_USER


def hand_over(path: Path) -> None:
    """Give the service user ownership of path (recursively)."""
    entry = pwd.getpwnam(SERVICE_USER)
    for folder, _dirs, files in os.walk(path):
        os.chown(folder, entry.pw_uid, entry.pw_gid)
        for name in files:
            os.chown(os.path.join(folder, name), entry.pw_uid, entry.pw_gid, follow_symlinks=False)


def as_service_user(argv: list[str]) -> list[str]:
    """argv run as the service user when we are root, unchanged otherwise."""
    if not running_as_root():
        return argv
    runuser = shutil.which("runuser")
    if runuser is None:
        raise ServiceError("opensearch", "running as root and `runuser` is missing")
    return [runuser, "-u", ensure_service_user(), "--", *argv]
