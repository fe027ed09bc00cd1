"""Removing a knowledge base from every store: its indices, its kgqr-meta entry, its Neo4j
nodes and relationships, and its job records (so a later ingest starts from scratch)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ingest.job_store import JobStore
from ingest.reembed import state_key as reembed_state_key
from ingest.write_leases import SETTLE_S, WriteLeases
from kgqr_core import graph_version
from plugin import schema

NEO4J_DELETE_BATCH = 10_000  # nodes per transaction: a million-node graph must not need one


@dataclass(frozen=True)
class RemovedKnowledgeBase:
    indices: list[str]
    nodes: int
    jobs: int
    recorded: bool = False  # it had a kgqr-meta record (an attached KB may have no index)
    # Leases of chunks still being written when the drop stopped waiting for them.
    still_writing: list[str] = field(default_factory=list)


def drop_knowledge_base(
    opensearch: Any,
    neo4j: Any,
    redis: Any,
    kb: str,
    say: Callable[[str], None] = lambda _line: None,
    settle_s: float = SETTLE_S,
) -> RemovedKnowledgeBase:
    """Its jobs are forgotten first, so that a chunk still queued finds its job gone and
    writes nothing (tasks.ingest_chunk_task). One already writing would write after the
    delete and make the indices again, so the stores are emptied once no chunk of the KB
    holds a write lease (ingest.write_leases), or `settle_s` ran out. An ingest of the
    same KB started during that wait is forgotten in turn, and its chunks waited for: it
    would otherwise go on writing into the emptied stores, on record as a live job."""
    schema.check_kb_name(kb)
    job_store, leases = JobStore(redis), WriteLeases(redis)
    deadline = time.monotonic() + settle_s
    redis.delete(reembed_state_key(kb))  # a re-embed writing stops at its next write
    jobs = _forget_jobs(job_store, kb)
    still_writing = leases.wait_until_none(kb, say, settle_s)
    while not still_writing and (late := _forget_jobs(job_store, kb)):
        jobs += late
        still_writing = leases.wait_until_none(kb, say, max(0.0, deadline - time.monotonic()))
    indices = []
    for name in (
        schema.documents_index(kb),
        schema.triples_index(kb),
        schema.deadletter_index(kb),
        schema.graph_index(kb),
        schema.vectors_index(kb),
    ):
        # A re-embedded knowledge base's names are aliases: delete the indices behind them,
        # and any versioned index an unfinished re-embed left.
        found = opensearch.indices.get(index=f"{name},{name}-g*", ignore_unavailable=True)
        for index in [i for i in found if i == name or schema.generation_of(name, i) is not None]:
            opensearch.indices.delete(index=index)
            indices.append(index)
    redis.delete(reembed_state_key(kb))  # its last write, waited for, saved its cursor
    answer = opensearch.delete(index=schema.META_INDEX, id=kb, ignore=[404])
    recorded = isinstance(answer, dict) and answer.get("result") == "deleted"
    nodes = 0
    while True:
        records, _, _ = neo4j.execute_query(
            "MATCH (n:Node {kb: $kb}) WITH n LIMIT $batch DETACH DELETE n RETURN count(*) AS gone",
            kb=kb,
            batch=NEO4J_DELETE_BATCH,
        )
        gone = int(records[0]["gone"])
        nodes += gone
        if gone < NEO4J_DELETE_BATCH:
            break
    graph_version.bump(redis, kb)
    if not still_writing:
        leases.forget(kb)
    return RemovedKnowledgeBase(
        indices, nodes, jobs, recorded=recorded, still_writing=still_writing
    )


def _forget_jobs(job_store: JobStore, kb: str) -> int:
    mine = job_store.jobs_of(kb)
    for job in mine:
        job_store.forget(job.job_id)
    return len(mine)
