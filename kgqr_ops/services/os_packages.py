"""Programs that come from the OS packages (Debian apt), installed on first use when kgqr
runs as root, named in a clear error otherwise."""

from __future__ import annotations

import shutil

from kgqr_ops.services.errors import ServiceError
from kgqr_ops.services.process import run_checked
from kgqr_ops.services.service_user import running_as_root


def ensure_installed(service: str, program: str, package: str) -> str:
    """The path of `program`, installing `package` with apt-get if it is missing."""
    found = shutil.which(program) or shutil.which(program, path="/usr/sbin:/usr/bin")
    if found:
        return found
    if not running_as_root() or shutil.which("apt-get") is None:
        raise ServiceError(service, f"{program} is not installed; `apt-get install {package}`")
    env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    run_checked(service, ["apt-get", "update", "-qq"], env=env)
    run_checked(service, ["apt-get", "install", "-y", "-qq", package], env=env)
    found = shutil.which(program, path="/usr/sbin:/usr/bin")
    if not found:
        raise ServiceError(service, f"installed {package} but {program} is still missing")
    return found
