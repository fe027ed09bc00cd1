"""Raw passages with no graph: JSONL lines ``{"id": ..., "title": ..., "text": ...}``.

Ingest tasks extract (head, relation, tail) triples from each passage with the LLM
(KG-CQR's construction prompt) and write a TTR sentence per triple.
"""

from __future__ import annotations

from collections.abc import Iterator

from ingest.records import Document, Record
from ingest.sources.base import Source, json_lines
from ingest.sources.corpus_qa import PASSAGE_STRUCTURE
from plugin.kb_meta import DocumentStructure


class PassagesSource(Source):
    kind = "passages"
    extract_triples = True
    reads_a_folder = False
    reads_a_file = True

    def structure(self) -> DocumentStructure:
        return PASSAGE_STRUCTURE

    def records(self) -> Iterator[Record]:
        for line in json_lines(self.path, self.limit):
            if line.error is not None:
                yield line.rejected(self.path.name)
                continue
            try:
                data = line.value
                yield Document(
                    id=str(data.get("id") or f"passage-{line.number}"),
                    type="passage",
                    title=str(data.get("title") or ""),
                    text=data["text"],
                )
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                yield line.rejected(self.path.name, f"{type(exc).__name__}: {exc}")
