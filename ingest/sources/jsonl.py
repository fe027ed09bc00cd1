"""Generic JSONL: ``documents.jsonl`` and optional ``relations.jsonl`` and ``structure.json``.

documents.jsonl, one object per line::

    {"id": "m1", "type": "movie", "title": "Heat", "fields": {"year": 1995, "genre": "crime"}}
    {"id": "p1", "type": "person", "title": "Michael Mann", "text": "American director ..."}

relations.jsonl::

    {"source": "m1", "type": "directed_by", "target": "p1"}

structure.json (optional; otherwise inferred from the documents)::

    {"types": {"movie": ["year", "genre"], "person": []}, "relations": ["directed_by"]}
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from ingest.records import Document, Record, Rejected, Relation
from ingest.sources.base import Source
from plugin.kb_meta import DocumentStructure


class JsonlSource(Source):
    kind = "jsonl"

    def _file(self, name: str) -> Path:
        return self.path / name if self.path.is_dir() else self.path

    def records(self) -> Iterator[Record]:
        yield from self._read(self._file("documents.jsonl"), Document, self.limit)
        relations = self.path / "relations.jsonl"
        if self.path.is_dir() and relations.is_file():
            yield from self._read(relations, Relation, None)

    def structure(self) -> DocumentStructure:
        given = self.path / "structure.json"
        if self.path.is_dir() and given.is_file():
            return DocumentStructure.model_validate_json(given.read_text())
        return DocumentStructure()

    @staticmethod
    def _read(
        path: Path, model: type[Document] | type[Relation], limit: int | None
    ) -> Iterator[Record]:
        count = 0
        with path.open(encoding="utf-8", errors="replace") as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                if limit is not None and count >= limit:
                    return
                count += 1
                try:
                    yield model.model_validate(json.loads(line))
                except (json.JSONDecodeError, ValidationError) as exc:
                    reason = f"{path.name}:{number}: {_short(exc)}"
                    yield Rejected(reason=reason, raw=line[:4000])


def _short(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'record'}: {e['msg']}" for e in exc.errors()
        )
    return str(exc)
