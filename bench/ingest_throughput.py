"""End-to-end ingest throughput versus the embedder's raw encode throughput.

Both are measured in this run on the same texts: `Embedder.encode` alone (before and after,
averaged), and a
real ingest job through Redis, a Celery worker, OpenSearch and Neo4j. The ratio says how
much the stores and the queue cost on top of embedding (goal: >= 0.9).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_common import save
from ingest import chunking, job_runner
from ingest.job_store import JobStore
from ingest.kb_removal import drop_knowledge_base
from ingest.sources import open_source
from ingest.tasks import chunk_sender
from kgqr_core import connections
from kgqr_core.embedder import get_embedder
from kgqr_core.settings import get_settings

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def corpus_texts(count: int) -> list[dict[str, str]]:
    corpus = SHARED / "musique100" / "corpus.json"
    if corpus.is_file():
        passages = json.loads(corpus.read_text())
        return [{"title": p["title"], "text": p["text"]} for p in passages[:count]]
    words = ["graph", "search", "vector", "relation", "entity", "document", "query", "passage"]
    return [
        {"title": f"Doc {i}", "text": " ".join(words[(i + j) % 8] for j in range(120))}
        for i in range(count)
    ]


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=600)
    parser.add_argument(
        "--chunk-size",
        type=int,
        default=chunking.DEFAULT_CHUNK_SIZE,
        help="records per Celery task (default: what `kgqr ingest` uses)",
    )
    args = parser.parse_args()
    settings = get_settings()
    texts = corpus_texts(args.docs)

    embedder = get_embedder(settings.embedder.model)
    combined = [f"{t['title']}\n{t['text']}" for t in texts]
    embedder.encode(combined[:32])  # warm-up

    def raw_encode_rate() -> float:
        started = time.perf_counter()
        embedder.encode(combined)
        return len(combined) / (time.perf_counter() - started)

    # Timed before and after the ingest, averaged: the machine's speed drifts within a run.
    raw_before = raw_encode_rate()
    print(f"raw encode: {raw_before:.1f} docs/s over {len(combined)} docs")

    kb = f"bench-ingest-{int(time.time())}"
    opensearch = connections.opensearch_client(settings)
    redis = connections.redis_client(settings)
    jobs = JobStore(redis)
    with tempfile.TemporaryDirectory() as folder, connections.neo4j_driver(settings) as neo4j:
        docs = Path(folder) / "documents.jsonl"
        with docs.open("w") as out:
            for i, t in enumerate(texts):
                out.write(json.dumps({"id": f"d{i}", "type": "passage", **t}) + "\n")
        dimension = job_runner.prepare_stores(settings, opensearch, neo4j)

        with job_runner.temporary_worker(settings) as worker:
            warm = Path(folder) / "warm"
            warm.mkdir()
            (warm / "documents.jsonl").write_text(docs.read_text().splitlines()[0] + "\n")
            for spec in (f"jsonl:{warm}", f"jsonl:{folder}"):
                started = time.perf_counter()
                job = job_runner.enqueue(
                    open_source(spec),
                    spec,
                    kb,
                    settings=settings,
                    opensearch=opensearch,
                    jobs=jobs,
                    send=chunk_sender(kb),
                    dimension=dimension,
                    chunk_size=args.chunk_size,
                    restart=True,
                )
                progress = job_runner.follow(jobs, job.job_id, lambda _p: None, timeout_s=1800)
                elapsed = time.perf_counter() - started
            rss = peak_rss_mb(worker.process.pid)
        assert progress.counts["documents"] == len(texts), progress
        end_to_end = len(texts) / elapsed
        drop_knowledge_base(opensearch, neo4j, redis, kb)
    raw_after = raw_encode_rate()
    raw_rate = (raw_before + raw_after) / 2
    print(f"raw encode again: {raw_after:.1f} docs/s; mean {raw_rate:.1f}")
    ratio = end_to_end / raw_rate
    print(f"end-to-end ingest: {end_to_end:.1f} docs/s ({elapsed:.1f} s for {len(texts)} docs)")
    print(f"ratio end-to-end / raw encode: {ratio:.2f} (goal >= 0.90)")
    print(f"worker peak RSS: {rss:.0f} MiB")
    save(
        "ingest_throughput",
        {"docs": len(texts), "chunk_size": args.chunk_size, "raw_encode_docs_per_s": raw_rate,
         "raw_encode_before_after": [raw_before, raw_after],
         "end_to_end_docs_per_s": end_to_end, "ratio": ratio, "worker_peak_rss_mb": rss},
    )  # fmt: skip


if __name__ == "__main__":
    main()
