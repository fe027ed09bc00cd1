"""How a source's records are cut into Celery tasks.

Kept apart from ``job_runner`` so the CLI can show the defaults without importing the
stores and the embedder.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ingest.records import set_aside_if_unstorable
from ingest.sources.base import Source

DEFAULT_CHUNK_SIZE = 256
GRAPH_ONLY_PER_EMBEDDED = 64
"""Relations and mentions cost the embedder nothing and Neo4j writes them fastest in
large transactions (16k-relation chunks loaded 1.6-2.1x faster than 256-relation ones), so
a chunk takes this many of them for each embedded record."""
# What costs a chunk its time: embedding (documents, triples) or an LLM's reading (extract).
EMBEDDED_KINDS = frozenset({"document", "triple", "extract"})


def chunks(source: Source, size: int) -> Iterator[list[dict[str, Any]]]:
    """Chunks of at most ``size`` embedded records (documents, triples) and at most
    ``size * GRAPH_ONLY_PER_EMBEDDED`` records in all, as JSON-ready dicts."""
    chunk: list[dict[str, Any]] = []
    embedded = 0
    for record in source.read_records():
        # Checked before JSON, which would write a NaN as null without a word.
        kept = set_aside_if_unstorable(record.model_dump())
        chunk.append((kept or record).model_dump(mode="json"))
        embedded += record.kind in EMBEDDED_KINDS
        if embedded >= size or len(chunk) >= size * GRAPH_ONLY_PER_EMBEDDED:
            yield chunk
            chunk, embedded = [], 0
    if chunk:
        yield chunk
