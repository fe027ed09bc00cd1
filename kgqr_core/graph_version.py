"""A knowledge base's graph version: a Redis counter every write to its Neo4j graph raises.

The proxy keeps in-memory copies of graphs (query_rewriter/graph/in_memory.py) and serves a
copy only while its version is the current one, so Neo4j stays the source of truth and a
copy is never older than the proxy's last look at this counter.
"""

from __future__ import annotations

import secrets
from typing import Any


def version_key(kb: str) -> str:
    return f"kgqr:graph-version:{kb}"


def epoch_key(kb: str) -> str:
    """A token set once per KB beside its counter and lost with it: a version number
    names one graph only together with its epoch (graph/shared_copies.py)."""
    return f"kgqr:graph-epoch:{kb}"


def new_epoch() -> str:
    return secrets.token_hex(8)


def bump(redis: Any, kb: str) -> None:
    """Record that `kb`'s graph changed (after the write, so a reload sees it)."""
    redis.incr(version_key(kb))


def parse(raw: bytes | str | None) -> int:
    """The stored counter; 0 for a graph nothing has been written to since versions began."""
    return int(raw) if raw is not None else 0
