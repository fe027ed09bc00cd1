"""The ingest worker's supervisor, with small real child processes standing in for Celery:
what it restarts, what it leaves ended, and that stopping it ends the child."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from ingest.worker_supervisor import RestartPolicy, SupervisedWorker, restart_policy

FAST = RestartPolicy(backoff_s=(0.05, 0.1), healthy_after_s=0.5, give_up_after=3)


def _child(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _counting_child(folder: Path, then: str) -> list[str]:
    """A child that appends a line to `starts` each time it starts, then runs `then`."""
    starts = folder / "starts"
    return _child(f"open({str(starts)!r}, 'a').write('x\\n'); {then}")


def _starts(folder: Path) -> int:
    path = folder / "starts"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_worker_that_dies_is_started_again_until_it_ends_by_itself(tmp_path: Path) -> None:
    """Dies twice (exit 1, as Celery's `Unrecoverable error` does), then exits 0 when asked
    to: two restarts, and the supervisor ends with the last exit code."""
    lines: list[str] = []
    starts = str(tmp_path / "starts")
    command = _counting_child(
        tmp_path, f"import sys; sys.exit(len(open({starts!r}).readlines()) < 3)"
    )
    supervisor = SupervisedWorker(command, policy=FAST, say=lines.append).start()
    assert supervisor.wait() == 0
    assert supervisor.restarts == 2 == _starts(tmp_path) - 1
    assert [line.split(";")[1].strip() for line in lines if "ended with" in line] == [
        "restarting it in 0.05 s",
        "restarting it in 0.1 s",
    ]
    assert "ended with exit code 1" in lines[0]


def test_a_worker_killed_by_a_signal_is_restarted(tmp_path: Path) -> None:
    lines: list[str] = []
    command = _counting_child(tmp_path, "import time; time.sleep(60)")
    supervisor = SupervisedWorker(command, policy=FAST, say=lines.append).start()
    try:
        first = supervisor.process
        _wait_for(lambda: _starts(tmp_path) == 1)
        first.kill()
        _wait_for(lambda: supervisor.restarts == 1 and _starts(tmp_path) == 2)
        assert supervisor.process is not first and supervisor.process.poll() is None
        assert "ended with signal SIGKILL" in lines[0]
    finally:
        supervisor.stop(timeout_s=5)
    assert supervisor.process.poll() is not None


def test_the_tidy_up_runs_between_a_workers_end_and_its_replacement_even_when_it_fails(
    tmp_path: Path,
) -> None:
    """`before_restart` (putting back the chunks the ended worker held) runs once per
    restart, after the child ended and before the next one starts; a failing one is
    reported and the replacement starts anyway."""
    lines: list[str] = []
    seen: list[int] = []

    def tidy() -> None:
        seen.append(_starts(tmp_path))
        if len(seen) == 2:
            raise ConnectionError("broker away")

    starts = str(tmp_path / "starts")
    command = _counting_child(
        tmp_path, f"import sys; sys.exit(len(open({starts!r}).readlines()) < 3)"
    )
    supervisor = SupervisedWorker(command, policy=FAST, say=lines.append, before_restart=tidy)
    assert supervisor.start().wait() == 0
    assert seen == [1, 2] and supervisor.restarts == 2
    assert "before restarting the ingest worker: ConnectionError('broker away')" in lines


def test_a_worker_that_keeps_dying_at_start_is_given_up_on(tmp_path: Path) -> None:
    """A bad setting makes every start fail at once: three quick exits, then the error
    stands instead of a restart loop."""
    lines: list[str] = []
    supervisor = SupervisedWorker(_counting_child(tmp_path, "import sys; sys.exit(1)"),
                                  policy=FAST, say=lines.append).start()  # fmt: skip
    assert supervisor.wait() == 1
    assert _starts(tmp_path) == 3 and supervisor.restarts == 2
    assert lines[-1].endswith("not restarting it (3 quick exits in a row)")


def test_with_restarts_off_a_dead_worker_stays_dead(tmp_path: Path) -> None:
    lines: list[str] = []
    never = restart_policy(restart=False)
    supervisor = SupervisedWorker(_counting_child(tmp_path, "import sys; sys.exit(1)"),
                                  policy=never, say=lines.append).start()  # fmt: skip
    assert supervisor.wait() == 1
    assert _starts(tmp_path) == 1 and supervisor.restarts == 0
    assert lines == [lines[0]] and lines[0].endswith("not restarting it (restarts are off)")


def test_a_stop_during_the_backoff_starts_nothing(tmp_path: Path) -> None:
    slow = RestartPolicy(backoff_s=(30.0,), healthy_after_s=60.0)
    supervisor = SupervisedWorker(_counting_child(tmp_path, "import sys; sys.exit(1)"),
                                  policy=slow, say=lambda _line: None).start()  # fmt: skip
    _wait_for(lambda: supervisor.process.poll() is not None)
    started = time.monotonic()
    supervisor.stop(timeout_s=5)
    assert time.monotonic() - started < 5  # did not sit out the 30 s backoff
    assert _starts(tmp_path) == 1 and supervisor.restarts == 0 and supervisor.exit_code == 1


def test_request_stop_asks_first_and_kills_when_asked_again(tmp_path: Path) -> None:
    """The worker's SIGTERM (Celery: finish running chunks, then exit) is ignored by this
    child, as a worker deep in a long chunk would: the second request kills it."""
    ignoring = tmp_path / "ignoring"
    command = _counting_child(
        tmp_path, "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"open({str(ignoring)!r}, 'w').close(); time.sleep(60)",
    )  # fmt: skip
    supervisor = SupervisedWorker(command, policy=FAST, say=lambda _line: None).start()
    _wait_for(ignoring.exists)  # the child's handler is in place
    supervisor.request_stop()
    time.sleep(0.5)
    assert supervisor.process.poll() is None
    supervisor.request_stop()
    assert supervisor.wait() == -9
    assert supervisor.restarts == 0


def _wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.02)


def test_a_worker_ended_by_a_usage_error_is_not_restarted(tmp_path: Path) -> None:
    """`kgqr ingest worker --bogus-flag`: Celery printed its usage five times, restarted
    with backoffs for 45 s, each ending alike."""
    lines: list[str] = []
    command = _counting_child(tmp_path, "import sys; sys.exit(2)")
    supervisor = SupervisedWorker(command, policy=FAST, say=lines.append).start()
    assert supervisor.wait() == 2
    assert supervisor.restarts == 0 and _starts(tmp_path) == 1
    assert lines and "a usage error: not restarting it" in lines[-1]
