"""The contract every source meets."""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Iterator
from pathlib import Path

from ingest.records import Record
from plugin.kb_meta import DocumentStructure


class Source(abc.ABC):
    kind: str
    # Passages without a graph ask ingest tasks to extract triples with the LLM.
    extract_triples: bool = False

    def __init__(self, path: Path, limit: int | None = None) -> None:
        self.path = path
        self.limit = limit

    @abc.abstractmethod
    def records(self) -> Iterator[Record]:
        """Documents first, then what refers to them; Rejected for lines that don't parse."""

    @abc.abstractmethod
    def structure(self) -> DocumentStructure:
        """The document types and fields, as far as known before streaming."""

    def files(self) -> list[Path]:
        return (
            sorted(p for p in self.path.rglob("*") if p.is_file())
            if self.path.is_dir()
            else [self.path]
        )

    def fingerprint(self) -> str:
        """Identifies this exact input (files, sizes, mtimes, limit): the same input gives
        the same job id, so a re-run resumes instead of starting over."""
        digest = hashlib.sha1(f"{self.kind}|{self.limit}".encode())
        for file in self.files():
            stat = file.stat()
            digest.update(f"|{file.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode())
        return digest.hexdigest()[:16]
