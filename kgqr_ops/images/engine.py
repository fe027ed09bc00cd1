"""The container engine that builds and runs kgqr's images: podman here, docker elsewhere.

Machines without a Docker engine run podman from Debian's packages. On their kernels podman
needs runc, cgroupfs and file limits below the hard limit of 20,000 (crun refuses hybrid
cgroups, and the default nofile limit is above what the kernel allows); those settings go
into a `containers.conf` of kgqr's own, named by CONTAINERS_CONF in every podman command
kgqr runs. Run podman or podman-compose by hand with the same variable
(`kgqr images env` prints it).
"""

from __future__ import annotations

import os
import shutil
import socket as sockets
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from kgqr_core.settings import Settings
from kgqr_ops.services.errors import ServiceError
from kgqr_ops.services.os_packages import ensure_installed

PODMAN_CONF = """\
# Written by kgqr: podman on kernels with hybrid cgroups and a nofile hard limit of 20,000.
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
"""
SERVICE = "images"


@dataclass(frozen=True)
class ContainerEngine:
    """One engine binary and the folder kgqr keeps its settings and sockets in."""

    binary: str
    state_dir: Path

    @property
    def is_podman(self) -> bool:
        return Path(self.binary).name == "podman"

    @property
    def conf_file(self) -> Path:
        return self.state_dir / "containers.conf"

    def environment(self) -> dict[str, str]:
        """Variables every command of this engine needs (podman's settings file)."""
        if not self.is_podman:
            return {}
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if not self.conf_file.is_file() or self.conf_file.read_text() != PODMAN_CONF:
            self.conf_file.write_text(PODMAN_CONF)
        return {"CONTAINERS_CONF": str(self.conf_file)}

    def run(
        self, args: Sequence[str], *, capture: bool = False, check: bool = True,
        output: IO[str] | None = None, stdin: IO[bytes] | None = None,
    ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """The engine's command, reading `stdin` if given; its output captured, sent to
        `output`, or shown."""
        result = subprocess.run(
            [self.binary, *args],
            env={**os.environ, **self.environment()},
            text=True,
            capture_output=capture,
            stdin=stdin,
            stdout=output,
            stderr=subprocess.STDOUT if output else None,
        )
        if check and result.returncode != 0:
            detail = (result.stderr or "").strip()[-2000:] if capture else "see the output above"
            raise ServiceError(SERVICE, f"`{Path(self.binary).name} {args[0]}` failed: {detail}")
        return result

    def image_id(self, tag: str) -> str | None:
        result = self.run(
            ["image", "inspect", "--format", "{{.Id}}", tag], capture=True, check=False
        )
        return result.stdout.strip() or None if result.returncode == 0 else None

    def api_socket(self) -> Path:
        """A Docker-API socket for libraries such as testcontainers: podman's own service,
        started once and left running (docker's socket is the daemon's)."""
        if not self.is_podman:
            return Path("/var/run/docker.sock")
        socket = self.state_dir / "podman.sock"
        if not _answers(socket):
            socket.unlink(missing_ok=True)
            log = (self.state_dir / "podman-service.log").open("a")
            # It outlives the command that starts it: run it from kgqr's own folder, since
            # conmon fails every container start once the folder it ran from is deleted
            # (a test run's fresh clone, removed before the next).
            subprocess.Popen(
                [self.binary, "system", "service", "--time=0", f"unix://{socket}"],
                cwd=self.state_dir,
                env={**os.environ, **self.environment()},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            deadline = time.monotonic() + 30
            while not _answers(socket):
                if time.monotonic() > deadline:
                    raise ServiceError(SERVICE, f"podman's API service did not open {socket}")
                time.sleep(0.2)
        return socket


def _answers(socket: Path) -> bool:
    if not socket.exists():
        return False
    with sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM) as client:
        try:
            client.connect(str(socket))
        except OSError:
            return False
    return True


def _docker_answers(binary: str) -> bool:
    """Whether a docker CLI has a daemon to talk to: some machines ship the CLI alone, and
    every command of it then fails (an image import that fails leaves its feeder hung)."""
    try:
        done = subprocess.run([binary, "info", "--format", "{{.ID}}"], capture_output=True,
                              timeout=20)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def container_engine(settings: Settings) -> ContainerEngine:
    """KGQR_CONTAINER_ENGINE if set, else podman, else a docker whose daemon answers;
    podman is installed from the OS packages (with runc) where neither is found."""
    preferred = settings.container_engine
    state_dir = settings.home / "containers"
    for name in [preferred] if preferred else ["podman", "docker"]:
        found = shutil.which(name)
        if found and (name != "docker" or preferred == "docker" or _docker_answers(found)):
            return ContainerEngine(found, state_dir)
    if preferred not in (None, "podman"):
        raise ServiceError(SERVICE, f"{preferred} is not installed")
    ensure_installed(SERVICE, "runc", "runc")
    return ContainerEngine(ensure_installed(SERVICE, "podman", "podman"), state_dir)
