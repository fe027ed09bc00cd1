"""Raw passages with no graph: JSONL lines ``{"id": ..., "title": ..., "text": ...}``.

Ingest tasks extract (head, relation, tail) triples from each passage with the LLM
(KG-CQR's construction prompt) and write a TTR sentence per triple.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from pydantic import ValidationError

from ingest.records import Document, Record, Rejected
from ingest.sources.base import Source
from ingest.sources.corpus_qa import PASSAGE_STRUCTURE
from plugin.kb_meta import DocumentStructure


class PassagesSource(Source):
    kind = "passages"
    extract_triples = True

    def structure(self) -> DocumentStructure:
        return PASSAGE_STRUCTURE

    def records(self) -> Iterator[Record]:
        with self.path.open(encoding="utf-8", errors="replace") as lines:
            kept = 0
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                if self.limit is not None and kept >= self.limit:
                    return
                kept += 1
                try:
                    data = json.loads(line)
                    yield Document(
                        id=str(data.get("id") or f"passage-{number}"),
                        type="passage",
                        title=str(data.get("title") or ""),
                        text=data["text"],
                    )
                except (json.JSONDecodeError, KeyError, TypeError, ValidationError) as exc:
                    reason = f"{self.path.name}:{number}: {type(exc).__name__}: {exc}"
                    yield Rejected(reason=reason[:500], raw=line[:4000])
