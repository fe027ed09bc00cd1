"""What a proxy reads of kgqr-meta's records: which indices are attached, each KB's default."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from query_rewriter.search.kb_indices import knowledge_bases_in_meta

pytestmark = pytest.mark.unit


class Meta:
    """kgqr-meta's records, as a search of it answers (a scripted stand-in)."""

    def __init__(self, *sources: dict[str, Any]) -> None:
        self.sources = sources

    async def search(self, index: str, body: dict[str, Any]) -> dict[str, Any]:
        return {"hits": {"hits": [{"_source": source} for source in self.sources]}}


def _default(strategy: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"version": 1, "strategy": strategy, "params": params, "reason": "r",
            "set_by": "s", "set_at": "t"}  # fmt: skip


def test_a_record_this_kgqr_cannot_read_leaves_the_others_read() -> None:
    """One record a newer kgqr wrote (a parameter's value that is no number here) failed
    the whole read, and every KB kept its last reading, or none at a proxy's start."""
    known = asyncio.run(knowledge_bases_in_meta(Meta(  # type: ignore[arg-type]
        {"kb": "newer", "embedder": "m", "defaults": [_default("graph", {"graph.gate": "auto"})]},
        {"kb": "odd", "embedder": "m", "attached": {"index": 7, "text_fields": "x"}},
        {"kb": "team", "embedder": "m", "attached": {"index": "articles"},
         "defaults": [_default("graph_walk", {})]},
    )))  # fmt: skip
    assert known.listed == {"newer", "odd", "team"}
    assert set(known.defaults) == {"team"}
    assert set(known.attached) == {"articles"}
    assert known.attached["articles"].default is not None
