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

from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from ingest.records import Document, Record, Relation
from ingest.sources.base import Source, SourceError, first_problem, json_lines
from kgqr_core.text_files import TEXT_ENCODING
from plugin.kb_meta import DocumentStructure


class JsonlSource(Source):
    kind = "jsonl"
    folder_files = ("documents.jsonl",)
    reads_a_file = True  # documents only

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
            try:
                return DocumentStructure.model_validate_json(
                    given.read_text(encoding=TEXT_ENCODING)
                )
            except ValidationError as exc:  # pydantic's own words named no file
                raise SourceError(f"{given}: {first_problem(exc)}") from None
        return DocumentStructure()

    @staticmethod
    def _read(
        path: Path, model: type[Document] | type[Relation], limit: int | None
    ) -> Iterator[Record]:
        for line in json_lines(path, limit):
            if line.error is not None:
                yield line.rejected(path.name)
                continue
            try:
                yield model.model_validate(line.value)
            except ValidationError as exc:
                yield line.rejected(path.name, _short(exc))


def _short(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'record'}: {e['msg']}" for e in exc.errors()
        )
    return str(exc)
