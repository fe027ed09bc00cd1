"""Many slow rewrites at once must not slow pass-through, hold memory, or outlive their budget.

A stand-in LLM that takes --llm-delay seconds per call (the local model takes 15-80 s)
serves `kgqr serve`; a separate process fires --rewrites HyDE searches, --concurrency at a
time, through the nginx front, while this process times pass-through searches through the
same front. Baseline: the same pass-through searches, same front, before the load, in this
run. Figures: pass-through p50 loaded / unloaded (goal <= 1.5), each rewrite's time against
its budget, fallbacks by stage, the proxy's memory before, at peak and after. Loopback
only; stops by itself.

    python -m bench.rewrite_load [--rewrites 300 --concurrency 100 --llm-delay 2 --budget 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_common import REPO, proxy_process, save
from bench.proxy_latency import copy_documents, percentile
from kgqr_core.settings import get_settings
from tests.integration.recording_llm import recording_llm

KB = "bench-load"
MANAGED = f"kgqr-{KB}-documents"
HYDE_ANSWER = json.dumps({"documents": ["Heat is a 1995 crime film about a crew of robbers."]})
PASS_THROUGH = {"query": {"match": {"text": "American actor"}}, "size": 5}


def ensure_kb(direct: str) -> None:
    if httpx.get(f"{direct}/{MANAGED}/_count").status_code == 200:
        return
    source = f"jsonl:{REPO / 'tests' / 'fixtures' / 'tiny_kb'}"
    subprocess.run(
        [sys.executable, "-c", "from kgqr_ops.cli import main; main()", "ingest", "run", source,
         "--kb", KB, "--timeout", "300"],
        cwd=REPO, check=True,
    )  # fmt: skip


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def fire_rewrites(front: str, count: int, concurrency: int, out: str) -> None:
    """The load, in its own process: `count` uncached HyDE searches, `concurrency` at once;
    writes each one's seconds, status and fallback stage to `out`."""

    async def run() -> list[dict]:
        limit = asyncio.Semaphore(concurrency)
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(timeout=120, limits=limits) as client:

            async def one(n: int) -> dict:
                body = {"query": {"match": {"text": f"crime film {n} {uuid.uuid4().hex[:8]}"}}}
                async with limit:
                    started = time.perf_counter()
                    response = await client.post(
                        f"{front}/{MANAGED}/_search", json=body, params={"kgqr.strategy": "hyde"}
                    )
                    fallback = response.headers.get("x-kgqr-fallback", "")
                    return {"s": time.perf_counter() - started, "status": response.status_code,
                            "fallback": fallback.split(":")[0] or None}  # fmt: skip

            return await asyncio.gather(*(one(n) for n in range(count)))

    Path(out).write_text(json.dumps(asyncio.run(run())))


def sample_pass_through(client: httpx.Client, url: str, stop: threading.Event | None,
                        rounds: int) -> list[float]:  # fmt: skip
    """Sequential pass-through searches: `rounds` of them, or until `stop` is set."""
    samples: list[float] = []
    while (stop is None and len(samples) < rounds) or (stop is not None and not stop.is_set()):
        started = time.perf_counter()
        client.post(url, json=PASS_THROUGH).raise_for_status()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rewrites", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--llm-delay", type=float, default=2.0, help="seconds per LLM call")
    parser.add_argument("--budget", type=float, default=4.0, help="KGQR_REWRITE_TIMEOUT_S")
    parser.add_argument("--max-concurrent", type=int, default=16,
                        help="KGQR_REWRITE_MAX_CONCURRENT")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=300, help="unloaded pass-through samples")
    args = parser.parse_args()
    direct = get_settings().opensearch.url.rstrip("/")
    ensure_kb(direct)
    plain = f"bench-load-plain-{uuid.uuid4().hex[:6]}"

    def slow(prompt: str) -> str:
        time.sleep(args.llm_delay)
        return HYDE_ANSWER

    with recording_llm(slow) as (llm_url, prompts), proxy_process({
        "KGQR_LLM_BASE_URL": llm_url,
        "KGQR_REWRITE_TIMEOUT_S": str(args.budget),
        "KGQR_REWRITE_MAX_CONCURRENT": str(args.max_concurrent),
        "KGQR_QUERY_LOG_ENABLED": "false",
    }) as proxy, httpx.Client(timeout=60) as client:  # fmt: skip
        copy_documents(client, f"{direct}/{MANAGED}", f"{direct}/{plain}")
        try:
            url = f"{proxy.front}/{plain}/_search"
            sample_pass_through(client, url, None, 30)  # warm-up
            unloaded = sample_pass_through(client, url, None, args.rounds)
            rss_before = rss_mb(proxy.pid)
            out = Path(f"/tmp/kgqr-rewrite-load-{uuid.uuid4().hex[:6]}.json")
            load = multiprocessing.get_context("spawn").Process(
                target=fire_rewrites, args=(proxy.front, args.rewrites, args.concurrency, str(out))
            )
            stop = threading.Event()
            peak = [rss_before]

            def watch_memory() -> None:
                while not stop.is_set():
                    peak.append(rss_mb(proxy.pid))
                    time.sleep(0.2)

            watcher = threading.Thread(target=watch_memory, daemon=True)
            started = time.perf_counter()
            load.start()
            watcher.start()

            def stop_when_loaded() -> None:
                load.join()
                stop.set()

            threading.Thread(target=stop_when_loaded, daemon=True).start()
            loaded = sample_pass_through(client, url, stop, 0)
            wall = time.perf_counter() - started
            watcher.join()
            rewrites = json.loads(out.read_text())
            out.unlink()
            time.sleep(2)
            rss_after = rss_mb(proxy.pid)
        finally:
            client.delete(f"{direct}/{plain}")
    seconds = [r["s"] for r in rewrites]
    figures = {
        "rewrites": args.rewrites, "concurrency": args.concurrency, "llm_delay_s": args.llm_delay,
        "budget_s": args.budget, "max_concurrent": args.max_concurrent,
        "llm_calls": len(prompts), "wall_s": round(wall, 1),
        "pass_through_ms": {
            "unloaded_p50": statistics.median(unloaded), "loaded_p50": statistics.median(loaded),
            "unloaded_p99": percentile(unloaded, 0.99), "loaded_p99": percentile(loaded, 0.99),
            "loaded_samples": len(loaded),
        },
        "rewrite_s": {"p50": statistics.median(seconds), "max": max(seconds)},
        "statuses": dict(Counter(str(r["status"]) for r in rewrites)),
        "fallbacks": dict(Counter(str(r["fallback"]) for r in rewrites)),
        "rss_mb": {"before": rss_before, "peak": max(peak), "after": rss_after},
    }  # fmt: skip
    ratio = figures["pass_through_ms"]["loaded_p50"] / figures["pass_through_ms"]["unloaded_p50"]
    figures["pass_through_p50_ratio"] = ratio
    print(f"pass-through through the front: p50 {statistics.median(unloaded):.2f} ms unloaded, "
          f"{statistics.median(loaded):.2f} ms under {args.concurrency} concurrent rewrites: "
          f"ratio {ratio:.2f} (goal <= 1.5; {len(loaded)} loaded samples)")  # fmt: skip
    print(f"rewrites: {args.rewrites} in {wall:.1f} s, p50 {figures['rewrite_s']['p50']:.2f} s, "
          f"max {max(seconds):.2f} s against a budget of {args.budget} s; statuses "
          f"{figures['statuses']}; fallbacks {figures['fallbacks']}; "
          f"{len(prompts)} LLM calls")  # fmt: skip
    print(f"proxy memory: {rss_before:.0f} MB before, {max(peak):.0f} MB peak, "
          f"{rss_after:.0f} MB after")  # fmt: skip
    save("rewrite_load", figures)


if __name__ == "__main__":
    main()
