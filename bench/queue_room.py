"""What sending chunks as workers take them costs, against sending a source whole.

The same documents are ingested twice through Redis, a Celery worker, OpenSearch and Neo4j
in one run: once sent whole (as `kgqr ingest --no-wait` sends), once through the queue room
(`kgqr ingest`, at most `--queued-chunks` unsettled), alternating over `--rounds` so the
machine's drift falls on both. It prints each one's docs/s, the ratio (goal: >= 0.95) and
the longest the broker's queue grew in each (the bound's point: at most the room).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_common import save
from bench.ingest_throughput import corpus_texts
from ingest import job_runner
from ingest.cli import queue_room
from ingest.job_store import JobStore
from ingest.kb_removal import drop_knowledge_base
from ingest.sources import open_source
from ingest.tasks import chunk_sender
from kgqr_core import connections
from kgqr_core.settings import get_settings


def ingest_once(stores: dict[str, Any], spec: str, kb: str, bounded: bool, chunk_size: int,
                room: int) -> tuple[float, int]:  # fmt: skip
    """Seconds to ingest `spec` afresh, and the queue's longest length meanwhile."""
    settings, jobs = stores["settings"], stores["jobs"]
    queue, lengths, done = settings.redis.ingest_queue, [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            lengths.append(jobs.redis.llen(queue))
            time.sleep(0.01)

    send = chunk_sender(kb)
    if bounded:
        limited = settings.replaced({"ingest_queued_chunks": room})
        send = queue_room(limited, jobs, print).bounded(send)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    job = job_runner.enqueue(
        open_source(spec), spec, kb, settings=settings, opensearch=stores["opensearch"],
        jobs=jobs, send=send, dimension=stores["dimension"], chunk_size=chunk_size,
        restart=True,
    )  # fmt: skip
    progress = job_runner.follow(jobs, job.job_id, lambda _p: None, timeout_s=1800)
    elapsed = time.perf_counter() - started
    done.set()
    sampler.join()
    assert progress.succeeded, progress
    return elapsed, max(lengths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=400)
    parser.add_argument("--chunk-size", type=int, default=16)
    parser.add_argument("--queued-chunks", type=int, default=2, help="the room when bounded")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    settings = get_settings()
    texts = corpus_texts(args.docs)
    kb = f"bench-room-{int(time.time())}"
    opensearch = connections.opensearch_client(settings)
    redis = connections.redis_client(settings)
    seconds: dict[str, list[float]] = {"whole": [], "bounded": []}
    longest: dict[str, int] = {"whole": 0, "bounded": 0}
    with tempfile.TemporaryDirectory() as folder, connections.neo4j_driver(settings) as neo4j:
        with (Path(folder) / "documents.jsonl").open("w") as out:
            for i, text in enumerate(texts):
                out.write(json.dumps({"id": f"d{i}", "type": "passage", **text}) + "\n")
        stores = {"settings": settings, "opensearch": opensearch, "jobs": JobStore(redis),
                  "dimension": job_runner.prepare_stores(settings, opensearch, neo4j)}  # fmt: skip
        with job_runner.temporary_worker(settings):
            ingest_once(stores, f"jsonl:{folder}", kb, False, args.chunk_size, 1)  # warm-up
            for _ in range(args.rounds):
                for way in ("whole", "bounded"):
                    spent, queued = ingest_once(stores, f"jsonl:{folder}", kb,
                                                way == "bounded", args.chunk_size,
                                                args.queued_chunks)  # fmt: skip
                    seconds[way].append(spent)
                    longest[way] = max(longest[way], queued)
                    print(f"{way}: {len(texts) / spent:.1f} docs/s, queue up to {queued} chunks")
        drop_knowledge_base(opensearch, neo4j, redis, kb)
    rate = {way: len(texts) / statistics.median(spent) for way, spent in seconds.items()}
    ratio = rate["bounded"] / rate["whole"]
    chunks = -(-len(texts) // args.chunk_size)
    print(f"{len(texts)} docs in {chunks} chunks, median of {args.rounds} rounds: sent whole "
          f"{rate['whole']:.1f} docs/s (queue up to {longest['whole']}), room of "
          f"{args.queued_chunks} {rate['bounded']:.1f} docs/s (queue up to "
          f"{longest['bounded']}); ratio {ratio:.2f} (goal >= 0.95)")  # fmt: skip
    save("queue_room", {
        "docs": len(texts), "chunk_size": args.chunk_size, "chunks": chunks,
        "queued_chunks": args.queued_chunks, "rounds": args.rounds, "seconds": seconds,
        "docs_per_s": rate, "ratio": ratio, "longest_queue": longest,
        "embedder": settings.embedder.model,
    })  # fmt: skip


if __name__ == "__main__":
    main()
