"""Ending a child process kgqr started (an nginx front, a temporary ingest worker)."""

from __future__ import annotations

import subprocess
from typing import Any


def terminate_child(process: subprocess.Popen[Any], timeout_s: float) -> None:
    """SIGTERM, then SIGKILL if the child has not exited within `timeout_s`."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
