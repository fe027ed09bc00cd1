"""What every local service shares: prepare once, start detached, wait for health, stop."""

from __future__ import annotations

import abc
import json
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from kgqr_core.layout import ServiceLayout
from kgqr_core.settings import Settings
from kgqr_ops.services.errors import ServiceError
from kgqr_ops.services.process import ManagedProcess, port_is_open, wait_until_healthy


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    state: str  # "running", "running (not started by kgqr)", "stopped", "port busy"
    address: str
    version: str | None
    pid: int | None


def port_of(url: str, default: int) -> int:
    return urlparse(url if "://" in url else f"tcp://{url}").port or default


def _command_line(argv: list[str], env: dict[str, str]) -> dict[str, object]:
    """How a start is recorded, and compared with what command() says now."""
    return {"argv": argv, "env": env}


class LocalService(abc.ABC):
    """One service kgqr can run on 127.0.0.1 without Docker."""

    name: str
    startup_timeout_s: float = 120.0
    optional = False  # started by `kgqr services up` only when named
    host = "127.0.0.1"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.layout = ServiceLayout(settings.home)
        self.process = ManagedProcess(self.name, self.layout.run, self.layout.logs)

    @property
    @abc.abstractmethod
    def port(self) -> int: ...

    @abc.abstractmethod
    def prepare(self) -> None:
        """Download, build and install what start() needs; cheap when already done."""

    @abc.abstractmethod
    def command(self) -> tuple[list[str], dict[str, str]]:
        """argv and environment of the service process."""

    @abc.abstractmethod
    def is_healthy(self) -> bool: ...

    @abc.abstractmethod
    def version(self) -> str | None: ...

    @property
    def _command_record(self) -> Path:
        return self.layout.run / f"{self.name}.command.json"

    def _runs_current_command(self) -> bool:
        """Whether our running process was started with what command() says now. A
        process from before the record existed counts as changed, so an upgrade that
        changes a service's flags takes effect at the next `up`, once."""
        try:
            recorded = json.loads(self._command_record.read_text())
        except (FileNotFoundError, ValueError):
            return False
        return bool(recorded == _command_line(*self.command()))

    def _start(self) -> None:
        self.prepare()
        argv, env = self.command()
        self.process.start(argv, env={**os.environ, **env}, cwd=self.layout.root)
        self._command_record.write_text(json.dumps(_command_line(argv, env)))
        self._wait_until_healthy()

    def _wait_until_healthy(self) -> None:
        wait_until_healthy(
            self.process, self.is_healthy, self.startup_timeout_s, self.startup_problem
        )

    def startup_problem(self) -> str | None:
        """While the service is not healthy yet: a reason it never will be, if known."""
        return None

    def up(self) -> str:
        """Start the service unless it already answers; returns what happened."""
        ours = self.process.pid() is not None
        if ours and self.is_healthy():
            if self._runs_current_command():
                return "already running"
            self.down()
            self._start()
            return "restarted (its command changed)"
        if ours and port_is_open(self.host, self.port):
            # Our own process holds the port but did not answer: still starting, or busy
            # (the LLM server answers nothing while it generates). Wait, don't fail.
            self._wait_until_healthy()
            return "already running (was busy)"
        if port_is_open(self.host, self.port):
            if self.is_healthy():
                return f"already running on port {self.port} (not started by kgqr)"
            raise ServiceError(
                self.name,
                f"port {self.port} on {self.host} is in use by something that is not a healthy "
                f"{self.name}; stop it or point kgqr at another port",
            )
        self._start()
        return "started"

    def down(self) -> bool:
        return self.process.stop()

    def status(self) -> ServiceStatus:
        pid = self.process.pid()
        address = f"{self.host}:{self.port}"
        if port_is_open(self.host, self.port):
            healthy = self.is_healthy()
            if pid is not None:
                state = "running" if healthy else "starting or unhealthy"
            else:
                state = "running (not started by kgqr)" if healthy else "port busy"
            return ServiceStatus(
                self.name, state, address, self.version() if healthy else None, pid
            )
        return ServiceStatus(self.name, "stopped", address, None, pid)
