"""Running ingest jobs from tests through the real Celery path."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ingest import job_runner
from ingest.job_store import JobProgress, JobStore
from ingest.kb_removal import drop_knowledge_base
from ingest.sources import open_source
from ingest.tasks import chunk_sender
from kgqr_core.settings import Settings
from plugin import schema

TINY_KB = f"jsonl:{Path(__file__).resolve().parents[1] / 'fixtures' / 'tiny_kb'}"


def enqueue_source(
    settings: Settings, opensearch: Any, neo4j: Any, redis: Any, spec: str, kb: str, **options: Any
) -> job_runner.EnqueuedJob:
    dimension = job_runner.prepare_stores(settings, opensearch, neo4j)
    limit = options.pop("limit", None)
    queue = options.pop("queue", None)

    return job_runner.enqueue(
        open_source(spec, limit=limit), spec, kb, settings=settings, opensearch=opensearch,
        jobs=JobStore(redis), send=chunk_sender(kb, queue), dimension=dimension, **options,
    )  # fmt: skip


def run_to_end(
    settings: Settings, opensearch: Any, neo4j: Any, redis: Any, spec: str, kb: str,
    timeout_s: float = 240, **options: Any,
) -> tuple[job_runner.EnqueuedJob, JobProgress]:  # fmt: skip
    enqueued = enqueue_source(settings, opensearch, neo4j, redis, spec, kb, **options)
    progress = job_runner.follow(JobStore(redis), enqueued.job_id, lambda _p: None, timeout_s)
    assert progress.finished, f"job did not finish in {timeout_s}s: {progress}"
    opensearch.indices.refresh(index=f"kgqr-{kb}-*")
    return enqueued, progress


@contextmanager
def ingested(
    settings: Settings, opensearch: Any, neo4j: Any, redis: Any, spec: str, kb: str
) -> Iterator[str]:
    """Knowledge base `kb` ingested afresh from `spec` for the block, dropped afterwards."""
    drop_knowledge_base(opensearch, neo4j, redis, kb)
    run_to_end(settings, opensearch, neo4j, redis, spec, kb)
    try:
        yield kb
    finally:
        drop_knowledge_base(opensearch, neo4j, redis, kb)


def sequel_source(folder: Path) -> str:
    """A second ingest for TINY_KB: Miami Vice (m9), directed by Michael Mann (p1)."""
    folder.mkdir()
    (folder / "documents.jsonl").write_text(
        json.dumps({"id": "m9", "type": "movie", "title": "Miami Vice"}) + "\n"
    )
    (folder / "relations.jsonl").write_text(
        json.dumps({"source": "m9", "type": "directed_by", "target": "p1"}) + "\n"
    )
    return f"jsonl:{folder}"


def document_ids(opensearch: Any, kb: str) -> list[str]:
    index = schema.documents_index(kb)
    opensearch.indices.refresh(index=index)
    hits = opensearch.search(index=index, body={"size": 10_000, "_source": False})["hits"]["hits"]
    return sorted(hit["_id"] for hit in hits)


def graph_copy_matches_neo4j(opensearch: Any, neo4j: Any, kb: str) -> dict[str, set[str]]:
    """Check that the graph's copy in OpenSearch (ingest/graph_projection.py) holds every
    node of the KB with exactly its edges in Neo4j (the test graphs have no hub above the
    copy's edges a node), each edge with its other end's type as Neo4j has it now, and
    nothing else; each node's neighbours, for more checks."""
    index = schema.graph_index(kb)
    opensearch.indices.refresh(index=index)
    copy: dict[str, Counter[tuple[Any, ...]]] = {}
    for hit in opensearch.search(index=index, body={"size": 10_000})["hits"]["hits"]:
        edges = hit["_source"]["edges"]
        copy[hit["_source"]["id"]] = Counter(
            zip(edges["n"], edges["t"], edges["r"], edges["o"], strict=True)
        )
    records, _, _ = neo4j.execute_query(
        "MATCH (s:Node {kb: $kb}) OPTIONAL MATCH (s)-[r]-(n:Node) "
        "RETURN s.id AS id, collect([n.id, n.type, coalesce(r.relation, toLower(type(r))), "
        "startNode(r) = s]) AS edges",
        kb=kb,
    )
    stored = {
        record["id"]: Counter(tuple(edge) for edge in record["edges"] if edge[0] is not None)
        for record in records
    }
    assert copy == stored
    return {node: {edge[0] for edge in edges} for node, edges in copy.items()}
