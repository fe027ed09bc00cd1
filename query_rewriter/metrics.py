"""Prometheus metrics of the proxy, served at /_kgqr/metrics.

`kgqr serve --workers N` runs N processes behind one port: each keeps its metrics in files
of a folder they share (PROMETHEUS_MULTIPROC_DIR, which serve sets), and any of them
answers with all of theirs. Kept per process, a scrape showed whichever process answered,
and counters seemed to go back.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

SHARED_FOLDER = "PROMETHEUS_MULTIPROC_DIR"

# Under `_kgqr`, a name no index can have: at `/metrics` kgqr answered for an index named
# `metrics` (a HEAD said it existed; a GET gave these counters instead of the index).
PATH = "/_kgqr/metrics"

REGISTRY = CollectorRegistry()
REQUESTS = Counter(
    "kgqr_requests_total", "Requests through the proxy", ["kind", "status"], registry=REGISTRY
)
REWRITE_SECONDS = Histogram(
    "kgqr_rewrite_seconds",
    "Latency of rewrites computed (cache hits are not timed), per strategy",
    ["strategy"],
    registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
STAGE_SECONDS = Histogram(
    "kgqr_stage_seconds",
    "Rewrite stage latency",
    ["strategy", "stage"],
    registry=REGISTRY,
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60),
)
PASSED_THROUGH = Counter(
    "kgqr_searches_passed_through_total",
    "Searches sent on as the caller sent them, by why: no_strategy, not_a_knowledge_base, "
    "scroll, format (cbor, smile), paging (a body from/size the engine refuses), "
    "content_type (a body kgqr does not read as JSON), no_hits (size 0), sort (by a field "
    "or ascending score), min_score, search_pipeline (the caller's own), collapse, profile, "
    "rescore, vector_query (a knn query with an LLM strategy), query_shape (a query kgqr "
    "does not rewrite), query_syntax "
    "(a query_string's operators, fields or wildcards, a prefix multi_match, or one too long "
    "to read), query_length (a query text over 4,096 characters), query_size (a query over "
    "1 MB), msearch_header, "
    "template (a search template the engine did not render for the caller), refused (the "
    "engine refused the caller's credentials or their search of the index: no rewrite)",
    ["reason"],
    registry=REGISTRY,
)
CACHE = Counter("kgqr_rewrite_cache_total", "Rewrite cache lookups", ["result"], registry=REGISTRY)
CACHE_UNAVAILABLE = Counter(
    "kgqr_rewrite_cache_unavailable_total",
    "Rewrite cache reads and writes Redis failed (each read is also counted a miss)",
    registry=REGISTRY,
)
FALLBACKS = Counter(
    "kgqr_fallbacks_total",
    "Rewrites that fell back to the plain query",
    ["strategy", "stage"],
    registry=REGISTRY,
)
QUERY_LOG = Counter(
    "kgqr_query_log_entries_total",
    "Query-log entries by outcome (written, dropped when the queue is full, failed to index)",
    ["result"],
    registry=REGISTRY,
)
BUDGETED = Counter(
    "kgqr_budgeted_searches_total",
    "Searches under KGQR_REWRITE_BUDGET_MS: answered with the full rewrite, or fast while it "
    "runs in the background (or not queued: background full)",
    ["served"],
    registry=REGISTRY,
)
BACKGROUND_REWRITES = Counter(
    "kgqr_background_rewrites_total",
    "Budgeted LLM rewrites finished in the background: cached, or fell back (not cached)",
    ["result"],
    registry=REGISTRY,
)
# Gauges of several processes add up, those of ended ones left out.
REWRITES_RUNNING = Gauge(
    "kgqr_rewrites_running",
    "Rewrites being computed (KGQR_REWRITE_MAX_CONCURRENT caps them)",
    registry=REGISTRY,
    multiprocess_mode="livesum",
)
LLM_WAITING = Gauge(
    "kgqr_llm_calls_waiting",
    "LLM calls waiting for one of the KGQR_LLM_MAX_CONCURRENT slots",
    registry=REGISTRY,
    multiprocess_mode="livesum",
)
GRAPH_READS = Counter(
    "kgqr_graph_expansions_total",
    "Graph expansions by where they were read: snapshot (the in-memory copy), opensearch "
    "(the KB's copy there), or neo4j (neither current)",
    ["source"],
    registry=REGISTRY,
)
GRAPH_SNAPSHOT_LOADS = Counter(
    "kgqr_graph_snapshot_loads_total",
    "In-memory graph copies: loaded (read from Neo4j), mapped (from the copy another "
    "process of this machine wrote), too_large (the KB expands in Neo4j), failed (retried "
    "later)",
    ["result"],
    registry=REGISTRY,
)
GRAPH_SNAPSHOT_RELATIONSHIPS = Gauge(
    "kgqr_graph_snapshot_relationships",
    "Relationships held in the proxy's in-memory graph copies",
    registry=REGISTRY,
    multiprocess_mode="livemax",  # one machine's processes map one copy
)


def follow(gauge: Gauge, read: Callable[[], float], every_s: float = 1.0) -> Callable[[], None]:
    """`gauge` shows what `read` says; the returned function stops that. Read when scraped
    in one process; with several, each writes its value every `every_s` (a scrape reads the
    folder's files, which a function read at scrape time never reaches: it showed 0)."""
    if not os.environ.get(SHARED_FOLDER):
        gauge.set_function(read)
        return lambda: None

    async def keep() -> None:
        while True:
            gauge.set(read())
            await asyncio.sleep(every_s)

    task = asyncio.get_running_loop().create_task(keep())

    def stop() -> None:
        task.cancel()

    return stop


def process_ended() -> None:
    """This process's live gauges leave the shared folder's sums (a worker restarted)."""
    if folder := os.environ.get(SHARED_FOLDER):
        mark_process_dead(os.getpid(), folder)  # type: ignore[no-untyped-call]


def exposition() -> bytes:
    """Every metric in Prometheus's text format: this process's, or with several
    processes sharing a folder, all of theirs."""
    folder = os.environ.get(SHARED_FOLDER)
    if not folder:
        return bytes(generate_latest(REGISTRY))
    registry = CollectorRegistry()
    MultiProcessCollector(registry, folder)  # type: ignore[no-untyped-call]
    return bytes(generate_latest(registry))
