"""End-to-end checks that the running services do what kgqr needs of them.

Each check exercises one capability for real (k-NN on the lucene engine, a hybrid query
through a normalisation pipeline, a typed Neo4j relationship, a Celery round trip, a
JSON answer from the LLM), cleans up after itself, and returns what it observed so the
caller — `kgqr services check` or a test — can judge it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kgqr_core.settings import Settings


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    observed: Any
    elapsed_ms: float


def _vector_index_body(dimension: int) -> dict[str, Any]:
    return {
        "settings": {"index": {"knn": True, "number_of_shards": 1, "number_of_replicas": 0}},
        "mappings": {
            "properties": {
                "text": {"type": "text"},
                "vector": {
                    "type": "knn_vector",
                    "dimension": dimension,
                    "method": {"name": "hnsw", "engine": "lucene", "space_type": "cosinesimil"},
                },
            }
        },
    }


SMOKE_DOCS = {
    "a": ("graph databases store relations", [1.0, 0.0, 0.0]),
    "b": ("search engines rank documents", [0.0, 1.0, 0.0]),
    "c": ("vectors capture meaning", [0.0, 0.0, 1.0]),
}


def _with_smoke_index(opensearch: Any, index: str, body: Callable[[], list[str]]) -> list[str]:
    opensearch.indices.create(index=index, body=_vector_index_body(3))
    try:
        for doc_id, (text, vector) in SMOKE_DOCS.items():
            opensearch.index(index=index, id=doc_id, body={"text": text, "vector": vector})
        opensearch.indices.refresh(index=index)
        return body()
    finally:
        opensearch.indices.delete(index=index, ignore_unavailable=True)


def knn_ranking(opensearch: Any, index: str) -> list[str]:
    """Ids ranked by a k-NN query close to doc 'b' (lucene HNSW)."""

    def search() -> list[str]:
        query = {"size": 3, "query": {"knn": {"vector": {"vector": [0.1, 0.9, 0.1], "k": 3}}}}
        hits = opensearch.search(index=index, body=query)["hits"]["hits"]
        return [hit["_id"] for hit in hits]

    return _with_smoke_index(opensearch, index, search)


def hybrid_ranking(opensearch: Any, index: str, pipeline: str) -> list[str]:
    """Ids ranked by a hybrid BM25 + k-NN query through a min-max normalisation pipeline.

    BM25 favours 'a' (it names graph relations) and k-NN favours 'c'; weights 0.3/0.7 put
    the vector side first, so the order proves both sub-queries were combined.
    """
    opensearch.transport.perform_request(
        "PUT",
        f"/_search/pipeline/{pipeline}",
        body={
            "phase_results_processors": [
                {
                    "normalization-processor": {
                        "normalization": {"technique": "min_max"},
                        "combination": {
                            "technique": "arithmetic_mean",
                            "parameters": {"weights": [0.3, 0.7]},
                        },
                    }
                }
            ]
        },
    )

    def search() -> list[str]:
        query = {
            "size": 3,
            "query": {
                "hybrid": {
                    "queries": [
                        {"match": {"text": "graph relations"}},
                        {"knn": {"vector": {"vector": [0.0, 0.1, 0.9], "k": 3}}},
                    ]
                }
            },
        }
        hits = opensearch.search(index=index, body=query, params={"search_pipeline": pipeline})
        return [hit["_id"] for hit in hits["hits"]["hits"]]

    try:
        return _with_smoke_index(opensearch, index, search)
    finally:
        opensearch.transport.perform_request("DELETE", f"/_search/pipeline/{pipeline}")


def neo4j_typed_relation(driver: Any, tag: str) -> dict[str, Any]:
    """Write (film)-[:DIRECTED_BY {year}]->(person) and read the relation back."""
    write = (
        "MERGE (f:KgqrSmoke {id: $film}) MERGE (p:KgqrSmoke {id: $person}) "
        "MERGE (f)-[r:DIRECTED_BY]->(p) SET r.year = $year"
    )
    read = (
        "MATCH (f:KgqrSmoke {id: $film})-[r]->(p) "
        "RETURN type(r) AS relation, r.year AS year, p.id AS target"
    )
    params = {"film": f"film-{tag}", "person": f"person-{tag}", "year": 1999}
    try:
        driver.execute_query(write, params)
        records, _, _ = driver.execute_query(read, {"film": params["film"]})
        return dict(records[0]) if records else {}
    finally:
        driver.execute_query(
            "MATCH (n:KgqrSmoke) WHERE n.id IN [$film, $person] DETACH DELETE n", params
        )


def celery_echo(settings: Settings, timeout_s: float = 60.0) -> dict[str, Any]:
    """Start a worker on a private queue, send it a task through Redis, return its answer
    (the payload it echoed, its pid) beside what was sent and the worker started: the
    task ran in that worker only if they agree (celery_echoed)."""
    from ingest.celery_app import create_app

    app = create_app(settings)
    queue = f"kgqr-smoke-{uuid.uuid4().hex[:8]}"
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "ingest.celery_app", "worker",
         "--pool", "solo", "--concurrency", "1", "-Q", queue, "--loglevel", "WARNING",
         "--hostname", f"{queue}@%h"],
        env={**os.environ, "KGQR_REDIS_URL": settings.redis.url},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    result = app.send_task("kgqr.worker.echo", args=[queue], queue=queue)
    try:
        return {**result.get(timeout=timeout_s), "sent": queue, "worker_pid": worker.pid}
    finally:
        result.forget()
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()


def celery_echoed(answer: dict[str, Any]) -> bool:
    """Whether the worker started for the check ran the task sent (celery_echo)."""
    return answer.get("payload") == answer["sent"] and answer.get("pid") == answer["worker_pid"]


def llm_json_object(settings: Settings) -> dict[str, Any]:
    """Ask the LLM for a JSON object with the OpenAI client; return the parsed object."""
    from openai import OpenAI

    client = OpenAI(
        base_url=settings.llm.base_url,
        api_key=settings.llm.api_key.get_secret_value(),
        timeout=settings.llm.timeout_s,
    )
    answer = client.chat.completions.create(
        model=settings.llm.model,
        messages=[
            {
                "role": "user",
                "content": 'Answer with a JSON object {"capital": ..., "country": ...} '
                "for the capital of France.",
            }
        ],
        response_format={"type": "json_object"},
        temperature=0,
        max_tokens=60,
    )
    return dict(json.loads(answer.choices[0].message.content or "{}"))


def timed(name: str, check: Callable[[], Any], judge: Callable[[Any], bool]) -> CheckResult:
    started = time.perf_counter()
    try:
        observed = check()
        ok = judge(observed)
    except Exception as exc:  # a diagnostic: report every failure instead of stopping
        observed, ok = f"{type(exc).__name__}: {exc}", False
    return CheckResult(name, ok, observed, (time.perf_counter() - started) * 1000)
