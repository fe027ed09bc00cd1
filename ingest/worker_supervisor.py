"""Keeping an ingest worker running: a Celery worker child restarted when it exits unasked.

Why a supervisor of our own: Celery 5.7 / kombu 5.7 can end a worker when its Redis
broker restarts. Seen once in CI (not reproduced in 8 deliberate restarts since): on the
lost connection kombu restores the unacknowledged chunks through a connection already
closed (its transport's `client` is None), the worker logs `Unrecoverable error:
AttributeError(... 'hostname')` and exits 1 — the trace of celery/kombu#582 and #1552,
apparently a race with the chunks still running. The chunks are not lost (unacknowledged: put
back on their queues before the restart, ingest.held_chunks), but with no worker left
every later job waits. A worker that exits 0 was asked to (`celery control shutdown`) and is
not restarted; one that keeps dying right after it starts (a bad setting) is given up on,
so a broken configuration ends with its error instead of looping.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO

from kgqr_core.child_process import terminate_child


@dataclass(frozen=True)
class RestartPolicy:
    backoff_s: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 30.0)
    """Waits before restarts after consecutive quick exits (the last one repeats)."""
    healthy_after_s: float = 60.0
    """A worker that ran this long before exiting starts the backoff afresh."""
    give_up_after: int = 5
    """Consecutive quick exits after which the supervisor stops restarting (0: never
    restart)."""


# What click (an unknown option, a bad value) and sysexits' EX_USAGE end Celery with: a
# worker started with a bad flag was restarted five times, printing its usage each time.
USAGE_ERRORS = frozenset({2, 64})


def restart_policy(restart: bool) -> RestartPolicy:
    """The default policy, or one that never restarts (`--no-restart`, a test that
    watches a worker die)."""
    return RestartPolicy() if restart else RestartPolicy(give_up_after=0)


def to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def worker_command(celery_args: Sequence[str] = ()) -> list[str]:
    """The Celery worker command line; `celery_args` as `celery worker` takes them."""
    return [sys.executable, "-m", "celery", "-A", "ingest.celery_app", "worker",
            "--loglevel", "INFO", *celery_args]  # fmt: skip


def describe_exit(code: int) -> str:
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


class SupervisedWorker:
    """One worker child at a time, restarted by a watcher thread while not stopped.

    `process` is the current child (it changes on a restart); `restarts` counts them;
    `exit_code` is set once the supervisor has ended (stopped, asked, or given up).
    `own_session`: the child out of the terminal's process group, for a supervisor that
    forwards signals itself (a terminal's Ctrl-C would reach the worker twice: Celery's
    cold shutdown); else a terminal's signals reach both, as they reach any child.
    `before_restart` runs between a worker's end and its replacement's start (what the
    ended one left to tidy: ingest.held_chunks); if it fails, the replacement starts anyway."""

    def __init__(
        self,
        command: Sequence[str],
        env: dict[str, str] | None = None,
        output: IO[bytes] | int | None = None,
        policy: RestartPolicy = RestartPolicy(),
        say: Callable[[str], None] = to_stderr,
        own_session: bool = False,
        before_restart: Callable[[], None] | None = None,
    ) -> None:
        self._command = list(command)
        self._env = env
        self._output = output
        self._policy = policy
        self._say = say
        self._own_session = own_session
        self._before_restart = before_restart
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._watcher = threading.Thread(target=self._watch, name="worker-supervisor", daemon=True)
        self._process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.exit_code: int | None = None

    @property
    def process(self) -> subprocess.Popen[bytes]:
        """The current worker child (another one after a restart)."""
        assert self._process is not None, "start() the supervisor first"
        return self._process

    def start(self) -> SupervisedWorker:
        self._process = self._spawn()
        self._watcher.start()
        return self

    def request_stop(self) -> None:
        """Ask the worker to finish its chunks and exit (Celery's warm shutdown); asked
        again, kill it. Returns at once: safe in a signal handler."""
        first = not self._stopping.is_set()
        self._stopping.set()
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                self._process.send_signal(signal.SIGTERM if first else signal.SIGKILL)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop restarting and end the current worker: SIGTERM, SIGKILL after `timeout_s`."""
        self._stopping.set()
        with self._lock:
            if self._process is not None:
                terminate_child(self._process, timeout_s=timeout_s)
        if self._watcher.is_alive():
            self._watcher.join()

    def wait(self) -> int:
        """Block until the supervisor has ended; the last worker's exit code."""
        while self._watcher.is_alive():
            self._watcher.join(timeout=0.5)  # short joins: signal handlers get to run
        assert self.exit_code is not None
        return self.exit_code

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self._command, env=self._env, stdout=self._output, stderr=subprocess.STDOUT,
            start_new_session=self._own_session,
        )  # fmt: skip

    def _watch(self) -> None:
        quick_exits = 0
        while True:
            started = time.monotonic()
            code = self.process.wait()
            ran_s = time.monotonic() - started
            if self._stopping.is_set() or code == 0:
                self.exit_code = code
                return
            quick_exits = 0 if ran_s >= self._policy.healthy_after_s else quick_exits + 1
            if code in USAGE_ERRORS:  # its command line is wrong: every restart ends alike
                self._say(f"ingest worker (pid {self.process.pid}) ended with "
                          f"{describe_exit(code)}, a usage error: not restarting it")  # fmt: skip
                self.exit_code = code
                return
            stated = (
                f"ingest worker (pid {self.process.pid}) ended with {describe_exit(code)} "
                f"after {ran_s:.0f} s"
            )
            if quick_exits >= self._policy.give_up_after:
                why = (
                    f"{quick_exits} quick exits in a row"
                    if self._policy.give_up_after
                    else "restarts are off"
                )
                self._say(f"{stated}; not restarting it ({why})")
                self.exit_code = code
                return
            backoff = self._policy.backoff_s
            delay = backoff[min(max(quick_exits - 1, 0), len(backoff) - 1)]
            self._say(f"{stated}; restarting it in {delay:g} s")
            if self._stopping.wait(delay):
                self.exit_code = code
                return
            if self._before_restart is not None:
                try:
                    self._before_restart()
                except Exception as exc:  # the replacement starts anyway
                    self._say(f"before restarting the ingest worker: {exc!r}")
            with self._lock:
                if self._stopping.is_set():
                    self.exit_code = code
                    return
                self._process = self._spawn()
                self.restarts += 1
            self._say(f"ingest worker restarted (pid {self.process.pid}, restart {self.restarts})")
