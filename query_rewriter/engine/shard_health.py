"""One answer's health from the several requests it was made of.

A rewritten search's answer is made of several engine requests: the hybrid search and the
caller's own query's totals and facets, or, fused in kgqr, one search per sub-query. Each
may time out or lose a shard; the answer kept the first's `timed_out` and `_shards`, and
said all was well when a part it showed was partial.
"""

from __future__ import annotations

from typing import Any


def with_worst_health(answer: dict[str, Any], *parts: dict[str, Any]) -> dict[str, Any]:
    """`answer`, timed out if any part did, with the most shards any part lost and each
    failure once."""
    merged = dict(answer)
    merged["timed_out"] = any(bool(part.get("timed_out")) for part in (answer, *parts))
    lost = [shards for part in parts if (shards := part.get("_shards") or {}).get("failed")]
    if not lost:
        return merged
    shards = dict(merged.get("_shards") or {})
    every = [*shards.get("failures", []), *(f for part in lost for f in part.get("failures", []))]
    failures, seen = [], set()
    for failure in every:  # one a shard (two parts may have lost the same)
        where = (failure.get("index"), failure.get("shard"))
        if None in where or where not in seen:
            seen.add(where)
            failures.append(failure)
    counts = [int(shards.get("failed", 0)), *(int(part["failed"]) for part in lost)]
    failed = max(*counts, len(failures))
    shards["failed"], shards["failures"] = failed, failures
    if "total" in shards and "successful" in shards:  # (skipped shards count as successful)
        shards["successful"] = max(0, min(int(shards["successful"]), int(shards["total"]) - failed))
    merged["_shards"] = shards
    return merged
