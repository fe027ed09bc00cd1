"""A knowledge base's graph version: a Redis counter every write to its Neo4j graph raises.

The proxy keeps in-memory copies of graphs (query_rewriter/graph/in_memory.py) and serves a
copy only while its version is the current one, so Neo4j stays the source of truth and a
copy is never older than the proxy's last look at this counter.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any


def version_key(kb: str) -> str:
    return f"kgqr:graph-version:{kb}"


def epoch_key(kb: str) -> str:
    """A token set anew with every bump and lost with the counter: a version number names
    one graph only together with its epoch (graph/shared_copies.py). A counter restarted
    at 0 (Redis lost its data) or rolled back (a failover, an older snapshot) and bumped
    again so never names a copy written before."""
    return f"kgqr:graph-epoch:{kb}"


def new_epoch() -> str:
    return secrets.token_hex(8)


def bump(redis: Any, kb: str) -> None:
    """Record that `kb`'s graph changed (after the write, so a reload sees it)."""
    with redis.pipeline(transaction=True) as both:
        both.incr(version_key(kb))
        both.set(epoch_key(kb), new_epoch())
        both.execute()


def parse(raw: bytes | str | None) -> int:
    """The stored counter; 0 for a graph nothing has been written to since versions began."""
    return int(raw) if raw is not None else 0


@dataclass(frozen=True)
class Revision:
    """One graph: its version with its epoch. The counter alone repeats once Redis lost it
    (or rolled back) and writes raised it again; a copy, or a cached rewrite, named by the
    number alone was then served as current for a graph it was never read from."""

    number: int
    epoch: str

    def __str__(self) -> str:
        return f"{self.epoch}-{self.number}"


async def revision(redis: Any, kb: str) -> Revision:
    """The KB's revision from an async Redis, its two keys read at once (a bump sets both
    in one transaction, so the pair is one graph's). A KB without an epoch (nothing
    written since Redis lost it, or since epochs began) is given one here, so every
    reader names the graph alike from now on."""
    keys = version_key(kb), epoch_key(kb)
    number, epoch = await redis.mget(*keys)
    if epoch is None:
        await redis.set(keys[1], new_epoch(), nx=True)
        number, epoch = await redis.mget(*keys)
    if epoch is None:
        raise RuntimeError(f"graph epoch of {kb} set and gone at once")
    return Revision(parse(number), epoch.decode() if isinstance(epoch, bytes) else str(epoch))
