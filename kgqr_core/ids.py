"""Ids kgqr derives from what it ingests, in one place: ingest writes them, the read path
and the evaluation look them up, so both must derive them the same way."""

from __future__ import annotations


def entity_id(name: str) -> str:
    """Entities are keyed by their normalised name, so every passage naming one shares it."""
    return "entity:" + " ".join(name.lower().split())


def passage_id(position: int) -> str:
    """A corpus passage's id: its position in the corpus file (MuSiQue, HotpotQA)."""
    return f"p{position}"
