"""Where knowledge bases come from. Each source streams records and knows its structure.

A source is named on the command line as ``KIND:PATH`` (``jsonl:data/kb``,
``stark:skb/prime/processed``, ``musique:../shared/data/musique100``,
``hotpotqa:../shared/data/hotpotqa100``, ``hotpotqa-kg:../shared/data/hotpotqa100``,
``passages:notes.jsonl``), and an attached index's graph as ``relations:edges.jsonl``.
"""

from __future__ import annotations

from pathlib import Path

from ingest.sources.attached_graph import RelationsFileSource
from ingest.sources.base import Source
from ingest.sources.corpus_qa import HotpotQaGraphSource, HotpotQaSource, MusiqueSource
from ingest.sources.jsonl import JsonlSource
from ingest.sources.passages import PassagesSource
from ingest.sources.stark import StarkSource

SOURCE_KINDS: dict[str, type[Source]] = {
    "jsonl": JsonlSource,
    "stark": StarkSource,
    "musique": MusiqueSource,
    "hotpotqa": HotpotQaSource,
    "hotpotqa-kg": HotpotQaGraphSource,
    "passages": PassagesSource,
    "relations": RelationsFileSource,
}


def open_source(spec: str, limit: int | None = None) -> Source:
    """The source a ``KIND:PATH`` spec names; limit caps how many documents it yields."""
    kind, sep, path = spec.partition(":")
    if not sep or kind not in SOURCE_KINDS:
        raise ValueError(
            f"source {spec!r} must be KIND:PATH with KIND one of {', '.join(SOURCE_KINDS)}"
        )
    location = Path(path).expanduser()
    if not location.exists():
        raise FileNotFoundError(f"source path {location} does not exist")
    return SOURCE_KINDS[kind](location, limit=limit)
