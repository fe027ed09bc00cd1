"""kgqr under rising load: pass-through, cached rewrites, and uncached `base` and `graph`
rewrites, each at concurrency 1, 2, 4, ... until throughput stops growing or latency
breaks; through `kgqr serve` with one and with two worker processes, and through the
nginx front. Per step: requests/s, p50, p99, errors, the proxy's memory (all its
processes); per series: the knee. Loopback only; stops by itself.

    python -m bench.load_steps [--kb hotpotqa --seconds 8 --max-concurrency 32]

The knee is the first step whose throughput is under 1.1x the step before, or whose p99
is over 10x the p50 at concurrency 1. The load client shares the 2 cores with the proxy,
OpenSearch and the embedder, so absolute requests/s are this machine's, not kgqr's.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import time
from pathlib import Path
from typing import Any

import httpx

from bench.bench_common import proxy_process, save
from bench.proxy_latency import copy_documents, percentile
from plugin import schema

QUESTIONS = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa100"
PLAIN_INDEX = "bench-load-plain"
MODES = ("pass-through", "cached", "base", "graph")


def process_tree(pid: int) -> list[int]:
    """`pid` and every process under it (uvicorn's workers, nginx's)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def process_tree_rss_mb(pid: int) -> float:
    """Resident memory of `pid` and every process under it."""
    total = 0.0
    for current in process_tree(pid):
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            continue
    return total


def request_for(mode: str, index: str, questions: list[str], n: int) -> tuple[str, dict, dict]:
    """(path, params, body) of the n-th request of a mode; uncached modes never repeat."""
    if mode == "pass-through":
        return f"/{PLAIN_INDEX}/_search", {}, {"query": {"match": {"text": questions[n % 50]}}}
    text = questions[0] if mode == "cached" else f"{questions[n % len(questions)]} ({n})"
    strategy = "base" if mode == "cached" else mode
    return f"/{index}/_search", {"kgqr.strategy": strategy}, {"query": {"match": {"text": text}}}


async def step(url: str, mode: str, index: str, questions: list[str], concurrency: int,
               seconds: float) -> dict[str, Any]:  # fmt: skip
    counter = itertools.count()
    latencies: list[float] = []
    errors = 0
    deadline = time.monotonic() + seconds

    async def client_loop(client: httpx.AsyncClient) -> None:
        nonlocal errors
        while time.monotonic() < deadline:
            path, params, body = request_for(mode, index, questions, next(counter))
            started = time.perf_counter()
            try:
                response = await client.post(path, params=params, json=body)
                failed = response.status_code >= 400 or "x-kgqr-fallback" in response.headers
            except httpx.HTTPError:
                failed = True
            latencies.append((time.perf_counter() - started) * 1000)
            errors += failed

    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        started = time.monotonic()
        await asyncio.gather(*(client_loop(client) for _ in range(concurrency)))
        elapsed = time.monotonic() - started
    return {"concurrency": concurrency, "requests": len(latencies),
            "per_s": len(latencies) / elapsed, "p50_ms": percentile(latencies, 0.5),
            "p99_ms": percentile(latencies, 0.99), "errors": errors}  # fmt: skip


def knee(steps: list[dict[str, Any]]) -> int | None:
    first_p50 = steps[0]["p50_ms"]
    for before, current in itertools.pairwise(steps):
        if current["per_s"] < 1.1 * before["per_s"] or current["p99_ms"] > 10 * first_p50:
            return int(current["concurrency"])
    return None


def series(url: str, pid: int, mode: str, index: str, questions: list[str],
           levels: list[int], seconds: float) -> dict[str, Any]:  # fmt: skip
    steps = []
    for concurrency in levels:
        figures = asyncio.run(step(url, mode, index, questions, concurrency, seconds))
        figures["proxy_rss_mb"] = round(process_tree_rss_mb(pid))
        steps.append(figures)
        print(f"  {mode:<12} c={concurrency:<3} {figures['per_s']:7.1f}/s  p50 "
              f"{figures['p50_ms']:7.1f}  p99 {figures['p99_ms']:8.1f} ms  errors "
              f"{figures['errors']:<4} rss {figures['proxy_rss_mb']} MB", flush=True)  # fmt: skip
        if figures["errors"] or (len(steps) > 1 and knee(steps) is not None):
            break
    return {"mode": mode, "steps": steps, "knee": knee(steps)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb", default="hotpotqa")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--max-concurrency", type=int, default=32)
    args = parser.parse_args()
    from kgqr_core.settings import get_settings

    direct = get_settings().opensearch.url.rstrip("/")
    index = schema.documents_index(args.kb)
    with httpx.Client(base_url=direct, timeout=60) as client:
        if client.head(f"/{PLAIN_INDEX}").status_code == 404:
            copy_documents(client, f"/{index}", f"/{PLAIN_INDEX}")
    questions = [q["question"] for q in json.loads((QUESTIONS / "queries_dev.json").read_text())]
    levels = [c for c in (1, 2, 4, 8, 16, 32, 64) if c <= args.max_concurrency]
    results = []
    for workers, entry in ((1, "serve"), (1, "front"), (2, "serve")):
        env = {"KGQR_REWRITE_CACHE_TTL_S": "3600"}
        with proxy_process(env, workers=workers) as proxy:
            url = proxy.url if entry == "serve" else proxy.front
            print(f"kgqr serve --workers {workers}, through {entry}:", flush=True)
            for mode in MODES:
                found = series(url, proxy.pid, mode, index, questions, levels, args.seconds)
                results.append({"workers": workers, "entry": entry, **found})
    print("\nknees (concurrency where throughput stopped growing or p99 broke):")
    for row in results:
        best = max(row["steps"], key=lambda s: s["per_s"])
        print(f"  workers {row['workers']} {row['entry']:<6} {row['mode']:<12} knee "
              f"{row['knee'] or '>' + str(row['steps'][-1]['concurrency'])}, best "
              f"{best['per_s']:.1f}/s at c={best['concurrency']}")  # fmt: skip
    save("load-steps", {"kb": args.kb, "seconds_per_step": args.seconds, "series": results})


if __name__ == "__main__":
    main()
