"""Background processes tracked by pid files, so `down` stops only what `up` started."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kgqr_ops.services.errors import ServiceError


def port_is_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class ManagedProcess:
    """One long-running service process: its pid file and its log file."""

    name: str
    run_dir: Path
    log_dir: Path

    @property
    def pid_file(self) -> Path:
        return self.run_dir / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.log_dir / f"{self.name}.log"

    def pid(self) -> int | None:
        """The pid we started, if that process is still alive."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        if _reaped(pid):
            self.pid_file.unlink(missing_ok=True)
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            self.pid_file.unlink(missing_ok=True)
            return None
        except PermissionError:
            return pid
        return pid

    def start(
        self, argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> int:
        """Start argv detached from this process (own session), logging to log_file."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            proc = subprocess.Popen(
                list(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        self.pid_file.write_text(str(proc.pid))
        return proc.pid

    def stop(self, timeout_s: float = 30.0) -> bool:
        """SIGTERM the process group we started, then SIGKILL; False if none was running."""
        pid = self.pid()
        if pid is None:
            return False
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.pid() is not None:
            time.sleep(0.2)
        if self.pid() is not None:
            _signal_group(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)
        return True

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


def _reaped(pid: int) -> bool:
    """True when pid was our child and has exited (a zombie still answers kill(pid, 0))."""
    try:
        reaped_pid, _status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return reaped_pid == pid


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def wait_until_healthy(
    process: ManagedProcess,
    is_healthy: Callable[[], bool],
    timeout_s: float,
    problem: Callable[[], str | None] = lambda: None,
) -> None:
    """Poll is_healthy until it holds; fail with the log tail if the process dies or stalls,
    and at once with `problem()` when it names a reason it never will be healthy."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if is_healthy():
            return
        if (reason := problem()) is not None:
            raise ServiceError(process.name, reason)
        if process.pid() is None:
            raise ServiceError(
                process.name,
                f"exited during start-up; last log lines ({process.log_file}):\n"
                + process.log_tail(),
            )
        time.sleep(1.0)
    raise ServiceError(
        process.name,
        f"not healthy after {timeout_s:.0f}s; last log lines ({process.log_file}):\n"
        + process.log_tail(),
    )


def run_checked(service: str, argv: Sequence[str], **kwargs: object) -> str:
    """Run a preparation step; on failure raise a ServiceError carrying its output."""
    result = subprocess.run(list(argv), capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        lines = (result.stdout + result.stderr).strip().splitlines()
        shown = lines if len(lines) <= 16 else [*lines[:8], "...", *lines[-8:]]
        raise ServiceError(service, f"`{' '.join(argv[:4])} ...` failed:\n" + "\n".join(shown))
    return str(result.stdout)
