"""Shared by the benchmark scripts: where results go, what machine produced them, the dev
sets they score, and a kgqr proxy in a process of its own."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import httpx

from kgqr_ops.background_proxy import free_port
from plugin import schema
from workbench.evaluation import graph_copy_wait
from workbench.evaluation.query_sets import JudgedQuery, load_query_set
from workbench.evaluation.runner import EvalTarget

RESULTS = Path(__file__).parent / "results"
REPO = Path(__file__).resolve().parents[1]
# The shared multi-hop dev sets, by the name a bench's --set takes ({data}: ../shared/data).
DEV_SETS = {"musique": "musique:{data}/musique100", "hotpotqa": "hotpotqa:{data}/hotpotqa100"}


def dev_set_parser(description: str) -> argparse.ArgumentParser:
    """The arguments of a bench that scores one dev set on the knowledge base of its corpus."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--set", choices=sorted(DEV_SETS), required=True)
    parser.add_argument("--kb", required=True, help="The knowledge base of that set's corpus.")
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    return parser


def dev_queries(name: str, data: Path) -> list[JudgedQuery]:
    """Every judged question of the dev set `name`, read from `data`."""
    return load_query_set(DEV_SETS[name].format(data=data), None, None)


def comparisons_text(comparisons: list[dict[str, Any]], metrics: tuple[str, ...]) -> str:
    """Paired comparisons as saved (PairedComparison.as_json), those of `metrics`, in one
    line of percent points: `R@5 +6.0 [+1.0, +11.0] 7/1  MRR ...`."""
    return "  ".join(
        f"{c['metric']} {100 * c['difference']:+.1f} [{100 * c['low']:+.1f}, "
        f"{100 * c['high']:+.1f}] {c['wins']}/{c['losses']}"
        for c in comparisons if c["metric"] in metrics
    )  # fmt: skip


class RunningProxy(NamedTuple):
    url: str
    front: str
    pid: int


def _busy_loop() -> None:
    while True:
        pass


@contextmanager
def busy_processes(count: int) -> Iterator[None]:
    """`count` processes each spinning one core: the load a busy LLM server puts beside
    whatever runs inside the block."""
    workers = [multiprocessing.Process(target=_busy_loop, daemon=True) for _ in range(count)]
    for worker in workers:
        worker.start()
    try:
        yield
    finally:
        for worker in workers:
            worker.terminate()
            worker.join()


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "node": platform.node()}


def save(name: str, figures: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    stamp = dt.datetime.now(dt.UTC)
    record = {"benchmark": name, "date": stamp.isoformat(), "machine": machine(), **figures}
    path = RESULTS / f"{name}-{stamp:%Y%m%dT%H%M%S}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"saved {path}")
    return path


@contextmanager
def proxy_process(env: dict[str, str] | None = None, workers: int = 1) -> Iterator[RunningProxy]:
    """`kgqr serve` in its own process, so the benchmark client does not share its GIL,
    with its nginx front. `env` overrides settings for this proxy only."""
    port, front_port = free_port(), free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from kgqr_ops.cli import main; main()",
            "serve",
            "--port",
            str(port),
            "--front-port",
            str(front_port),
            "--log-level",
            "WARNING",
            "--workers",
            str(workers),
        ],
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                httpx.get(f"{url}/_kgqr/metrics", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield RunningProxy(url, f"http://127.0.0.1:{front_port}", server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)


def wait_for_graph_copy(proxy_url: str, kb: str, timeout_s: float = 300) -> str:
    """Until the proxy walks `kb` on its in-memory copy (loaded on first use), so a run's
    first questions are measured like its last; the source it ended on. The wait `kgqr
    eval` does, from a bench's synchronous code."""

    async def wait() -> str | None:
        async with httpx.AsyncClient(base_url=proxy_url, timeout=120) as client:
            own = EvalTarget(schema.documents_index(kb))
            return await graph_copy_wait.wait_for_graph_copy(
                client, own.index, own.query, deadline_s=timeout_s
            )

    return asyncio.run(wait()) or "no graph"
