"""The metrics of `kgqr serve --workers N`, kept in a folder its processes share."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

# Run in a process of its own: prometheus_client chooses where values live at import.
FOLLOWED = """
import asyncio
from query_rewriter import metrics

async def main():
    stop = metrics.follow(metrics.LLM_WAITING, lambda: 7, every_s=0.01)
    metrics.REWRITES_RUNNING.inc(2)
    await asyncio.sleep(0.05)
    stop()
    print(metrics.exposition().decode())
    metrics.process_ended()
    print("ENDED")
    print(metrics.exposition().decode())

asyncio.run(main())
"""


def test_a_gauge_read_from_a_function_is_shown_from_every_worker(tmp_path: Path) -> None:
    """A function read at scrape time never reaches the shared folder's files: under
    --workers, `kgqr_llm_calls_waiting` always read 0."""
    environment = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", FOLLOWED], env=environment,
                          capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    running, ended = done.stdout.split("ENDED")
    assert "kgqr_llm_calls_waiting 7.0" in running, running
    assert "kgqr_rewrites_running 2.0" in running, running
    # A process that ended leaves the live sums: a restarted worker's count does not linger.
    assert "kgqr_llm_calls_waiting 7.0" not in ended, ended
