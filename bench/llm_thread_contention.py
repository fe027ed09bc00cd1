"""Local LLM decode speed with and without a competing CPU load, per OpenMP wait policy.

llama.cpp's CPU backend here is built with OpenMP, and its threads meet at a barrier
after every operation of every token. With as many compute threads as cores, one busy
process elsewhere (the embedder, OpenSearch, a test run) can take a core from one of them;
a thread that spins at the barrier then burns its time slice waiting for the one that
cannot run. This runs a second server on its own port for each policy (libgomp's default,
and ``OMP_WAIT_POLICY=PASSIVE``, wait by sleeping, which `kgqr services up` uses), times
the same completions on an idle machine and beside one busy-looping process, and prints
tokens/s and the ratios.

Run it when nothing else is using the CPU; it starts and stops its own servers and leaves
the one `kgqr services up` runs alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_common import busy_processes, save
from kgqr_core.child_process import terminate_child
from kgqr_core.settings import get_settings
from kgqr_ops.services.http_probe import get_json
from kgqr_ops.services.llm_server import LlmServer

PROMPT = "Describe in detail how a river delta forms, step by step."
# None: OMP_WAIT_POLICY unset, libgomp's default (spin for a while, then sleep).
POLICIES = {"default": None, "passive": "PASSIVE"}


def start_server(port: int, policy: str | None) -> subprocess.Popen[bytes]:
    settings = get_settings().replaced({"llm_base_url": f"http://127.0.0.1:{port}/v1"})
    argv, service_env = LlmServer(settings).command()
    env = {**os.environ, **service_env}
    env.pop("OMP_WAIT_POLICY", None)
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while get_json(f"http://127.0.0.1:{port}/v1/models") is None:
        if process.poll() is not None or time.monotonic() > deadline:
            terminate_child(process, timeout_s=10)
            raise RuntimeError(f"the LLM server on port {port} did not start")
        time.sleep(0.5)
    return process


def tokens_per_second(port: int, max_tokens: int) -> float:
    started = time.perf_counter()
    response = httpx.post(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": max_tokens,
            "temperature": 0,
        },
        timeout=900,
    )
    response.raise_for_status()
    return float(response.json()["usage"]["completion_tokens"]) / (time.perf_counter() - started)


def measure(port: int, rounds: int, max_tokens: int, competing: int) -> list[float]:
    with busy_processes(competing):
        return [tokens_per_second(port, max_tokens) for _ in range(rounds)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8091, help="port for the servers it starts")
    parser.add_argument("--rounds", type=int, default=3, help="completions per cell")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--competing", type=int, default=1, help="busy processes beside it")
    args = parser.parse_args()

    cells: dict[str, dict[str, Any]] = {}
    for policy, wait_policy in POLICIES.items():
        server = start_server(args.port, wait_policy)
        try:
            tokens_per_second(args.port, 8)  # warm-up: page the model in
            for load, competing in (("idle", 0), ("contended", args.competing)):
                rates = measure(args.port, args.rounds, args.max_tokens, competing)
                cells[f"{policy}/{load}"] = {"tokens_per_s": rates,
                                             "median": statistics.median(rates)}  # fmt: skip
                print(f"{policy:8} {load:10} tokens/s {statistics.median(rates):6.2f} "
                      f"({', '.join(f'{r:.2f}' for r in rates)})")  # fmt: skip
        finally:
            terminate_child(server, timeout_s=10)

    def ratio(a: str, b: str) -> float:
        return float(cells[a]["median"] / cells[b]["median"])

    figures = {
        "threads": get_settings().llm.threads,
        "competing_processes": args.competing,
        "max_tokens": args.max_tokens,
        "cells": cells,
        "passive_vs_default_idle": ratio("passive/idle", "default/idle"),
        "passive_vs_default_contended": ratio("passive/contended", "default/contended"),
        "contended_vs_idle_default": ratio("default/contended", "default/idle"),
        "contended_vs_idle_passive": ratio("passive/contended", "passive/idle"),
    }
    for name in [k for k in figures if "_vs_" in k]:
        print(f"{name}: {figures[name]:.2f}x")
    save("llm_thread_contention", figures)


if __name__ == "__main__":
    main()
