"""Where a graph strategy's added time goes: each strategy's p50 and its stages' p50s
(the explain's `stages_ms`) against `base`, searched one at a time through one proxy, the
strategies interleaved (each question's order rotated), on a knowledge base already
ingested.

The goal of issue #55 is an added p50 of at most 15 ms over base. This says which stages
make up what a strategy adds, so a change can be judged by the stage it moves; run it
with the code before and after a change, alternately, on an otherwise idle machine.

    python -m bench.strategy_stages --kb musique --queries musique:../shared/data/musique100
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import httpx

from bench.bench_common import proxy_process, save, wait_for_graph_copy
from plugin import schema
from workbench.evaluation.query_sets import load_query_set


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb", required=True, help="an ingested knowledge base")
    parser.add_argument("--queries", required=True, help="a query set, as `kgqr eval` takes")
    parser.add_argument("--strategies", default="base,graph,graph_walk,graph_mix",
                        help="comma-separated; the first is the baseline")  # fmt: skip
    parser.add_argument("--limit", type=int, default=50, help="questions")
    parser.add_argument("--rounds", type=int, default=2, help="measured rounds (one more warms)")
    args = parser.parse_args()
    strategies = args.strategies.split(",")
    questions = [query.text for query in load_query_set(args.queries, limit=args.limit)]
    with proxy_process({"KGQR_REWRITE_CACHE_TTL_S": "0"}) as proxy:
        source = wait_for_graph_copy(proxy.url, args.kb)
        timed = asyncio.run(_interleaved(proxy.url, args.kb, strategies, questions, args.rounds))
    baseline = statistics.median(timed[strategies[0]]["total"])
    figures: dict[str, Any] = {}
    for strategy in strategies:
        p50s = {stage: round(statistics.median(ms), 2) for stage, ms in timed[strategy].items()}
        total = p50s.pop("total")
        figures[strategy] = {
            "p50_ms": total,
            "added_p50_ms": round(total - baseline, 2),
            "ratio": round(total / baseline, 3),
            "stages_p50_ms": p50s,
        }
        stages = ", ".join(f"{stage} {ms:.1f}" for stage, ms in p50s.items())
        print(f"{strategy:11s} p50 {total:6.1f} ms, {total - baseline:+6.1f} over "
              f"{strategies[0]} ({total / baseline:.2f}x); stages: {stages}")  # fmt: skip
    save("strategy-stages", {"kb": args.kb, "queries": len(questions), "rounds": args.rounds,
                             "graph_source": source, "strategies": figures})  # fmt: skip


async def _interleaved(
    url: str, kb: str, strategies: list[str], questions: list[str], rounds: int
) -> dict[str, dict[str, list[float]]]:
    """Each strategy's wall-clock times and stage times, in ms, over the measured rounds."""
    index = schema.documents_index(kb)
    timed: dict[str, dict[str, list[float]]] = {strategy: {"total": []} for strategy in strategies}
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        for measured in [False] + [True] * rounds:
            for number, question in enumerate(questions):
                turn = number % len(strategies)
                for strategy in strategies[turn:] + strategies[:turn]:
                    body = {"size": 10, "_source": False, "query": {"match": {"text": question}}}
                    params = {"kgqr.strategy": strategy, "kgqr.explain": "true"}
                    started = time.perf_counter()
                    answer = await client.post(f"/{index}/_search", params=params, json=body)
                    elapsed = (time.perf_counter() - started) * 1000
                    answer.raise_for_status()
                    explain = answer.json()["kgqr"]
                    if explain.get("fallback"):
                        raise SystemExit(f"{strategy} fell back: {explain['fallback']}")
                    if measured:
                        timed[strategy]["total"].append(elapsed)
                        for stage, ms in explain["stages_ms"].items():
                            timed[strategy].setdefault(stage, []).append(ms)
    return timed


if __name__ == "__main__":
    main()
