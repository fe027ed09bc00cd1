"""Proxy overhead and strategy latency, each against a baseline measured in this run.

1. Pass-through: the same searches on an ordinary index, direct vs through kgqr
   (interleaved), p50/p99; goal p50 ratio <= 1.10.
2. Cached rewrite: a managed-index search whose rewrite is cached, vs the same final hybrid
   query sent directly; goal: added p50 <= 5 ms.
3. LLM strategies with the local LLM, uncached (a fresh query each): per-strategy latency,
   with HyDE as the reference the KG strategies are compared to.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_common import proxy_process, save
from kgqr_core.settings import get_settings
from query_rewriter.engine.hybrid_query import search_params

# Multi-hop questions of the kind the MuSiQue knowledge base answers, for the LLM strategies.
QUESTIONS = [
    "who founded the label that released the album of the band from the city",
    "which journal publishes mathematical physics",
    "what river flows through the capital of the country where the film was shot",
]
QUERIES = [
    "journal physics",
    "american film director",
    "river in europe",
    "football club",
    "national park",
    "university founded",
    "album released",
    "battle of the war",
]


def copy_documents(client: httpx.Client, source: str, dest: str) -> None:
    """The managed index's text as an ordinary index (this OpenSearch build has no
    _reindex), so pass-through is timed on real documents, not an empty index."""
    hits = client.post(f"{source}/_search", json={"size": 10_000, "_source": ["title", "body"]})
    lines = []
    for hit in hits.raise_for_status().json()["hits"]["hits"]:
        lines += [json.dumps({"index": {"_id": hit["_id"]}}), json.dumps(hit["_source"])]
    if not lines:
        raise SystemExit(f"{source} has no documents: ingest the knowledge base first")
    response = client.post(f"{dest}/_bulk", params={"refresh": "true"},
                           content="\n".join(lines) + "\n",
                           headers={"content-type": "application/x-ndjson"})  # fmt: skip
    if response.raise_for_status().json()["errors"]:
        raise SystemExit(f"copying {source} failed: {response.text[:500]}")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed_post(client: httpx.Client, url: str, body: dict, params: dict | None = None) -> float:
    started = time.perf_counter()
    response = client.post(url, json=body, params=params or {})
    response.raise_for_status()
    return (time.perf_counter() - started) * 1000


def passthrough(
    client: httpx.Client, proxy: str, front: str, direct: str, managed: str, rounds: int
) -> dict:
    """The same searches on an ordinary index directly, through `kgqr serve`, and through
    its nginx front, interleaved."""
    plain = f"bench-plain-{uuid.uuid4().hex[:6]}"
    copy_documents(client, f"{direct}/{managed}", f"{direct}/{plain}")
    routes = {"direct": direct, "proxy": proxy, "front": front}
    latencies: dict[str, list[float]] = {name: [] for name in routes}
    for _ in range(rounds):
        for text in QUERIES:
            body = {"query": {"match": {"body": text}}, "size": 10}
            for name, url in routes.items():
                latencies[name].append(timed_post(client, f"{url}/{plain}/_search", body))
    client.delete(f"{direct}/{plain}")
    p50 = {name: statistics.median(values) for name, values in latencies.items()}
    p99 = {name: percentile(values, 0.99) for name, values in latencies.items()}
    for name in ("proxy", "front"):
        print(f"pass-through via {name}: p50 {p50[name]:.2f} ms vs direct {p50['direct']:.2f} ms, "
              f"ratio {p50[name] / p50['direct']:.2f} (goal <= 1.10); "
              f"p99 {p99[name]:.2f} vs {p99['direct']:.2f}")  # fmt: skip
    return {"p50_ms": p50, "p99_ms": p99, "p50_ratio": p50["proxy"] / p50["direct"],
            "p50_ratio_front": p50["front"] / p50["direct"]}  # fmt: skip


def cached_rewrite(
    client: httpx.Client, proxy: str, direct: str, managed: str, rounds: int
) -> dict:
    lat_cached, lat_final = [], []
    params = {"kgqr.strategy": "base"}
    for text in QUERIES:  # warm the rewrite cache and learn each final query
        body = {"query": {"match": {"text": text}}, "size": 10}
        explain_params = {**params, "kgqr.explain": "true"}
        response = client.post(f"{proxy}/{managed}/_search", json=body, params=explain_params)
        final = response.json()["kgqr"]["final_query"]
        for _ in range(rounds // 2):
            lat_final.append(timed_post(client, f"{direct}/{managed}/_search", final,
                                        search_params({}, final)))  # fmt: skip
            lat_cached.append(timed_post(client, f"{proxy}/{managed}/_search", body, params))
    added = statistics.median(lat_cached) - statistics.median(lat_final)
    print(f"cached rewrite: p50 {statistics.median(lat_cached):.2f} ms vs the same hybrid "
          f"query direct {statistics.median(lat_final):.2f} ms: added {added:.2f} ms "
          "(goal <= 5 ms)")  # fmt: skip
    return {"p50_proxy_ms": statistics.median(lat_cached),
            "p50_direct_same_query_ms": statistics.median(lat_final),
            "added_p50_ms": added}  # fmt: skip


def llm_strategies(
    client: httpx.Client, proxies: dict[str, tuple[str, str]], managed: str, rounds: int
) -> dict:
    """Uncached latency per strategy: each round asks every strategy the same fresh question
    (a random suffix defeats every cache), strategies interleaved so load drift hits all;
    `proxies` maps a label to (proxy URL, strategy)."""
    samples: dict[str, list[dict]] = {label: [] for label in proxies}
    for round_no in range(rounds):
        text = f"{QUESTIONS[round_no % len(QUESTIONS)]} {uuid.uuid4().hex[:6]}"
        body = {"query": {"match": {"text": text}}, "size": 10}
        for label, (proxy, strategy) in proxies.items():
            started = time.perf_counter()
            strategy_params = {"kgqr.strategy": strategy, "kgqr.explain": "true"}
            result = client.post(f"{proxy}/{managed}/_search", json=body, params=strategy_params)
            elapsed = (time.perf_counter() - started) * 1000
            explain = result.json()["kgqr"]
            samples[label].append({"ms": elapsed, "stages_ms": explain["stages_ms"],
                                   "llm_calls": explain["llm_calls"],
                                   "prompt_chars": explain["llm_prompt_chars"],
                                   "fallback": explain["fallback"]})  # fmt: skip
            print(f"round {round_no + 1} {label:>14}: {elapsed:8.0f} ms, "
                  f"{explain['llm_calls']} LLM calls, prompt chars {explain['llm_prompt_chars']},"
                  f" fallback={explain['fallback']}")  # fmt: skip
    per_label = {}
    for label, rows in samples.items():
        stages = {stage for row in rows for stage in row["stages_ms"]}
        per_label[label] = {
            "p50_ms": statistics.median(row["ms"] for row in rows),
            "stages_p50_ms": {
                stage: statistics.median(row["stages_ms"].get(stage, 0.0) for row in rows)
                for stage in sorted(stages)
            },
            "prompt_chars_p50": statistics.median(
                sum(row["prompt_chars"].values()) for row in rows
            ),
            "fallbacks": sum(row["fallback"] is not None for row in rows),
            "runs": rows,
        }
    if "hyde" in per_label:
        for label, row in per_label.items():
            row["vs_hyde"] = row["p50_ms"] / per_label["hyde"]["p50_ms"]
            print(f"{label:>14}: p50 {row['p50_ms']:8.0f} ms, {row['vs_hyde']:.2f}x HyDE, "
                  f"prompt chars p50 {row['prompt_chars_p50']:.0f}")  # fmt: skip
    return per_label


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kb", default="musique-sample", help="an ingested knowledge base")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--sections", default="passthrough,cached,strategies",
                        help="which of passthrough, cached, strategies to run")  # fmt: skip
    parser.add_argument("--strategies", default="prf,hyde,rar,agr")
    parser.add_argument("--llm-rounds", type=int, default=3,
                        help="fresh questions per LLM strategy (reports the median)")  # fmt: skip
    parser.add_argument("--kar-triples", action="store_true",
                        help="also time kar with the paper's full triples in the prompt "
                        "(KGQR_KAR_KNOWLEDGE_FORMAT=triples, a second proxy)")  # fmt: skip
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    direct = get_settings().opensearch.url
    managed = f"kgqr-{args.kb}-documents"
    figures: dict[str, object] = {"kb": args.kb, "rounds": args.rounds}
    with ExitStack() as stack:
        proxy, front, _ = stack.enter_context(proxy_process())
        client = stack.enter_context(httpx.Client(timeout=600))
        if "passthrough" in sections:
            figures["passthrough"] = passthrough(client, proxy, front, direct, managed, args.rounds)
        if "cached" in sections:
            figures["cached_rewrite"] = cached_rewrite(client, proxy, direct, managed, args.rounds)
        if "strategies" in sections:
            proxies = {s: (proxy, s) for s in args.strategies.split(",")}
            if args.kar_triples:
                paper, _, _ = stack.enter_context(
                    proxy_process({"KGQR_KAR_KNOWLEDGE_FORMAT": "triples"})
                )
                proxies["kar (triples)"] = (paper, "kar")
            figures["llm_rounds"] = args.llm_rounds
            figures["strategies"] = llm_strategies(client, proxies, managed, args.llm_rounds)
    save("proxy_latency", figures)


if __name__ == "__main__":
    main()
