"""Before an evaluation that reads the graph: wait until the proxy reads the KB's graph
from its in-memory copy.

A proxy expands in Neo4j until its copy of a KB's graph is loaded (seconds; ~23 s at a
million relations), and Neo4j's hub cap keeps other edges than the copy's. An evaluation
started on a fresh proxy therefore ranked its first questions from one and the rest from
the other, so the same run gave MuSiQue `graph` R@5 68.7 one time and 69.3 another. Waiting
makes a run reproducible and times the searches as a long-running proxy serves them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx

PROBE_STRATEGY = "graph"  # reads the graph and calls no LLM


async def wait_for_graph_copy(
    client: httpx.AsyncClient,
    index: str,
    query_of: Callable[[str], dict[str, Any]],
    deadline_s: float = 60.0,
    every_s: float = 0.5,
) -> str | None:
    """Where the proxy reads the graph once its copy is loaded, or when `deadline_s` has
    passed (a graph too large to copy stays in Neo4j): the explain's `graph_source`. None
    when the KB has no graph to read (the probe fell back). Each probe asks a new text, so
    a proxy with a rewrite cache cannot answer it from the cache."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + deadline_s
    probe = 0
    while True:
        probe += 1
        try:
            response = await client.post(
                f"/{index}/_search",
                params={"kgqr.strategy": PROBE_STRATEGY, "kgqr.explain": "true"},
                json={"query": query_of(f"graph copy probe {probe}"), "size": 1},
            )
        except httpx.TransportError:
            return None  # the run's first search says what is wrong, as it would have
        if response.status_code != 200:
            return None
        explain = response.json().get("kgqr") or {}
        source = (explain.get("details") or {}).get("graph_source")
        if source is None or source.startswith("snapshot") or loop.time() >= give_up:
            return str(source) if source else None
        await asyncio.sleep(every_s)
