"""Retrieval quality per strategy on MuSiQue dev questions, through the kgqr proxy.

Recall@2/5/10 over each question's gold passages (the ``is_supporting`` paragraphs,
matched to corpus passages by exact title and text, so repeated titles are not
conflated) and MRR of the first gold passage. `base` is the baseline measured in the
same run. The issue's full evaluation (50 questions x 7 strategies, HotpotQA too) belongs
to `kgqr eval`; this script is the quick, honest check.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_common import save
from bench.proxy_latency import proxy_process

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "musique100"


def gold_sets(limit: int) -> list[tuple[str, set[str]]]:
    corpus = json.loads((SHARED / "corpus.json").read_text())
    position = {(p["title"], p["text"]): f"p{i}" for i, p in enumerate(corpus)}
    questions = json.loads((SHARED / "queries_dev.json").read_text())[:limit]
    return [
        (
            q["question"],
            {
                position[(p["title"], p["paragraph_text"])]
                for p in q["paragraphs"]
                if p["is_supporting"]
            },
        )
        for q in questions
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kb", default="musique")
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument(
        "--strategies", default="base,hyde,kar,kar_no_kg,kar_no_drf,kgcqr,kar+boost"
    )
    args = parser.parse_args()
    questions = gold_sets(args.limit)
    index = f"kgqr-{args.kb}-documents"
    results: dict[str, dict[str, float]] = {}
    with proxy_process() as proxy, httpx.Client(timeout=900) as client:
        for strategy in args.strategies.split(","):
            recalls: dict[int, list[float]] = {2: [], 5: [], 10: []}
            reciprocal, latencies, fallbacks = [], [], 0
            for text, gold in questions:
                started = time.perf_counter()
                response = client.post(
                    f"{proxy}/{index}/_search",
                    params={"kgqr.strategy": strategy, "kgqr.explain": "true"},
                    json={"query": {"match": {"text": text}}, "size": 10, "_source": False},
                )
                latencies.append(time.perf_counter() - started)
                body = response.json()
                fallbacks += body["kgqr"]["fallback"] is not None
                ranked = [hit["_id"] for hit in body["hits"]["hits"]]
                for k in recalls:
                    recalls[k].append(len(gold & set(ranked[:k])) / len(gold))
                first = next((i for i, doc in enumerate(ranked, start=1) if doc in gold), None)
                reciprocal.append(1 / first if first else 0.0)
            results[strategy] = {
                **{f"R@{k}": 100 * statistics.mean(v) for k, v in recalls.items()},
                "MRR": 100 * statistics.mean(reciprocal),
                "p50_s": statistics.median(latencies),
                "fallbacks": fallbacks,
            }
            row = results[strategy]
            print(
                f"{strategy:>12}  R@2 {row['R@2']:5.1f}  R@5 {row['R@5']:5.1f}  "
                f"R@10 {row['R@10']:5.1f}  MRR {row['MRR']:5.1f}  p50 {row['p50_s']:6.1f}s  "
                f"fallbacks {fallbacks}",
                flush=True,
            )
    save(
        "strategy_quality",
        {
            "dataset": "musique100 dev",
            "questions": len(questions),
            "kb": args.kb,
            "results": results,
        },
    )


if __name__ == "__main__":
    main()
