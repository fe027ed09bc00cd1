"""Fusing a strategy's ranking with `base`'s (the hybrid search of the query alone), so
expansions add depth without pushing the best first hits down: `fusion.plain=1` on any
strategy (the parameters are in strategies/params.py, as every strategy accepts them).

`base`'s top `fusion.keep` hits (default 1) keep their places; the rest is ordered by
reciprocal rank fusion of the two rankings (`fusion.plain=1`), or in the strategy's own
order (`fusion.plain=2`, "pin": the top protected, the depth left to the strategy, which
RRF gives back to base). It costs one more search (both read deep: hybrid_query.FUSION_DEPTH).
"""

from __future__ import annotations

from typing import Any

from query_rewriter.engine.hybrid_query import rrf_fuse


def _key(hit: dict[str, Any]) -> str:
    return f"{hit['_index']}/{hit['_id']}"


def fuse_protecting_top(
    plain: list[dict[str, Any]],
    rewritten: list[dict[str, Any]],
    keep: int,
    start: int,
    size: int,
    rrf: bool = True,
) -> list[dict[str, Any]]:
    """The page [start, start + size) of the fused ranking (`rrf` False: below the kept
    hits, the rewritten ranking as it is)."""
    pinned = plain[:keep]
    pinned_keys = {_key(hit) for hit in pinned}
    rest = rrf_fuse([plain, rewritten], size=len(plain) + len(rewritten)) if rrf else rewritten
    ordered = pinned + [hit for hit in rest if _key(hit) not in pinned_keys]
    return ordered[start : start + size]
