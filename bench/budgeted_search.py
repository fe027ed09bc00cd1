"""Budgeted LLM rewrites: is a cold `kar` search as fast as a `graph` search, and is the full
rewrite served once it is ready?

Two `kgqr serve` processes over the same knowledge base, each with a rewrite cache (and LLM
answer cache) of its own, emptied first: one budgeted (KGQR_REWRITE_BUDGET_MS, default 0)
answering `kar`, one plain answering `graph`. For each question both are asked, in
alternating order, so background LLM work (which the budgeted proxy really does) slows both
alike. Baseline: `graph`'s p50 in this run; goal: budgeted kar p50 <= graph p50 + 10 ms.
Then, once the background rewrites are done (or --drain-s passed), the queued questions
are asked again and the bench counts how many got the full kar rewrite.

    python -m bench.budgeted_search [--kb hotpotqa --queries 30 --budget-ms 0]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_common import proxy_process, save
from bench.proxy_latency import percentile
from plugin.schema import documents_index
from workbench.evaluation.query_sets import load_query_set

BUDGETED_DB, PLAIN_DB = 10, 11


def search(
    client: httpx.Client, url: str, index: str, strategy: str, text: str
) -> tuple[float, Any]:
    started = time.perf_counter()
    response = client.post(
        f"{url}/{index}/_search",
        params={"kgqr.strategy": strategy, "kgqr.explain": "true"},
        json={"query": {"match": {"text": text}}, "size": 10},
    )
    response.raise_for_status()
    return (time.perf_counter() - started) * 1000, response.json()["kgqr"]


def background_done(url: str) -> float:
    text = httpx.get(f"{url}/_kgqr/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("kgqr_background_rewrites_total{")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb", default="hotpotqa")
    parser.add_argument("--query-set", default="hotpotqa:../shared/data/hotpotqa100")
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--budget-ms", type=int, default=0)
    parser.add_argument("--drain-s", type=float, default=900.0)
    args = parser.parse_args()
    texts = [q.text for q in load_query_set(args.query_set, "dev")][: args.queries]
    index = documents_index(args.kb)
    for db in (BUDGETED_DB, PLAIN_DB):
        redis.Redis.from_url(f"redis://127.0.0.1:6379/{db}").flushdb()
    budgeted_env = {
        "KGQR_REWRITE_BUDGET_MS": str(args.budget_ms),
        "KGQR_CACHE_REDIS_URL": f"redis://127.0.0.1:6379/{BUDGETED_DB}",
        "KGQR_QUERY_LOG_ENABLED": "false",
    }
    plain_env = {
        "KGQR_CACHE_REDIS_URL": f"redis://127.0.0.1:6379/{PLAIN_DB}",
        "KGQR_QUERY_LOG_ENABLED": "false",
    }
    order = random.Random(7)
    ms: dict[str, list[float]] = {"graph": [], "kar_budgeted": []}
    served: dict[str, int] = {}
    queued: list[str] = []
    with (
        proxy_process(budgeted_env) as budgeted,
        proxy_process(plain_env) as plain,
        httpx.Client(timeout=600) as client,
    ):
        search(client, plain.url, index, "graph", "warm-up")  # model loads, connections
        search(client, budgeted.url, index, "base", "warm-up")
        for text in texts:
            pair = [("graph", plain.url, "graph"), ("kar_budgeted", budgeted.url, "kar")]
            order.shuffle(pair)
            for label, url, strategy in pair:
                took, explain = search(client, url, index, strategy, text)
                ms[label].append(took)
                if label == "kar_budgeted":
                    budget = explain.get("budget") or {}
                    kind = explain["strategy"] if not budget else f"{budget['served']} (budget)"
                    served[kind] = served.get(kind, 0) + 1
                    if budget.get("pending"):
                        queued.append(text)
        deadline = time.monotonic() + args.drain_s
        while background_done(budgeted.url) < len(queued) and time.monotonic() < deadline:
            time.sleep(5)
        finished = background_done(budgeted.url)
        again = [search(client, budgeted.url, index, "kar", text)[1] for text in queued]
    full = sum(1 for explain in again if explain["strategy"] == "kar" and explain["cached"])
    p50 = {label: statistics.median(values) for label, values in ms.items()}
    figures = {
        "kb": args.kb,
        "queries": len(texts),
        "budget_ms": args.budget_ms,
        "p50_ms": p50,
        "p95_ms": {label: percentile(values, 0.95) for label, values in ms.items()},
        "budgeted_minus_graph_p50_ms": p50["kar_budgeted"] - p50["graph"],
        "budgeted_over_graph_p50": p50["kar_budgeted"] / p50["graph"],
        "first_answers": served,
        "queued_in_background": len(queued),
        "background_finished": finished,
        "asked_again_full_kar": full,
    }
    for label in ms:
        print(f"{label:>13}: p50 {p50[label]:7.1f} ms  p95 {figures['p95_ms'][label]:7.1f} ms")
    print(
        f"budgeted kar - graph p50: {figures['budgeted_minus_graph_p50_ms']:+.1f} ms "
        f"(ratio {figures['budgeted_over_graph_p50']:.2f}; goal <= +10 ms)"
    )
    print(f"first answers: {served}; queued {len(queued)}, finished {finished:.0f}")
    print(f"asked again after the background: {full} of {len(queued)} got the full kar rewrite")
    save("budgeted-search", figures)


if __name__ == "__main__":
    main()
