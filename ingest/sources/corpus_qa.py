"""The multi-hop QA corpora in ../shared/data: MuSiQue (with its third-party OpenIE KG)
and HotpotQA (with a title-link graph built here). Passages are keyed by position (``p0``,
``p1``, ...) because titles repeat.

MuSiQue's ``openie_*.json`` lists, per passage in corpus order, the entities and
(head, relation, tail) triples GPT-3.5 extracted: a corpus-centric KG in KG-CQR's style.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ijson
from ijson.common import ObjectBuilder

from ingest.records import (
    CorpusTriple,
    Document,
    Mention,
    Record,
    Rejected,
    Relation,
)
from ingest.sources.base import Source
from ingest.title_links import RELATION as LINK_RELATION
from ingest.title_links import TitleLinker
from plugin.kb_meta import DocumentStructure

PASSAGE_STRUCTURE = DocumentStructure(types={"passage": ["title", "text"]})


def passage_id(position: int) -> str:
    return f"p{position}"


class MusiqueSource(Source):
    kind = "musique"

    def structure(self) -> DocumentStructure:
        return PASSAGE_STRUCTURE

    def _openie_file(self) -> Path | None:
        return next(iter(sorted(self.path.glob("openie_*.json"))), None)

    def records(self) -> Iterator[Record]:
        with (self.path / "corpus.json").open("rb") as corpus:
            for position, passage in enumerate(ijson.items(corpus, "item")):
                if self.limit is not None and position >= self.limit:
                    break
                yield Document(
                    id=passage_id(position),
                    type="passage",
                    title=passage["title"],
                    text=passage["text"],
                )
        openie = self._openie_file()
        if openie is not None:
            yield from self._graph(openie)

    def _graph(self, openie: Path) -> Iterator[Record]:
        with openie.open("rb") as stream:
            for position, doc in enumerate(array_items(stream, "docs")):
                if self.limit is not None and position >= self.limit:
                    break
                yield from _passage_graph(passage_id(position), doc)


def array_items(stream: Any, prefix: str) -> Iterator[Any]:
    """The items of the JSON array at `prefix`, streamed, stopping when the array ends.

    HippoRAG's OpenIE files end with summary fields holding NaN, which strict JSON
    parsers reject; nothing after the array is needed, so nothing after it is read.
    """
    builder: ObjectBuilder | None = None
    depth = 0
    for path, event, value in ijson.parse(stream):
        if builder is None:
            if path == prefix and event == "end_array":
                return
            if path == f"{prefix}.item":
                if event in ("start_map", "start_array"):
                    builder, depth = ObjectBuilder(), 0
                else:
                    yield value
                    continue
            else:
                continue
        builder.event(event, value)
        if event in ("start_map", "start_array"):
            depth += 1
        elif event in ("end_map", "end_array"):
            depth -= 1
            if depth == 0:
                yield builder.value
                builder = None


def _passage_graph(pid: str, doc: dict[str, Any]) -> Iterator[Record]:
    for entity in dict.fromkeys(doc.get("extracted_entities") or []):
        if isinstance(entity, str) and entity.strip():
            yield Mention(passage_id=pid, entity=entity.strip())
    for triple in doc.get("extracted_triples") or []:
        if (
            isinstance(triple, list)
            and len(triple) == 3
            and all(isinstance(part, str) and part.strip() for part in triple)
        ):
            head, relation, tail = (part.strip() for part in triple)
            yield CorpusTriple(head=head, relation=relation, tail=tail, passage_id=pid)
        else:
            yield Rejected(reason=f"{pid}: malformed triple", raw=repr(triple)[:4000])


class HotpotQaSource(Source):
    """HotpotQA passages, then `links_to` relations between passages whose text names
    another's title (see ingest.title_links); the file is read once per pass, never held."""

    kind = "hotpotqa"

    def structure(self) -> DocumentStructure:
        return PASSAGE_STRUCTURE

    def _passages(self) -> Iterator[tuple[int, str, Any]]:
        with (self.path / "corpus.json").open("rb") as corpus:
            for position, (title, sentences) in enumerate(ijson.kvitems(corpus, "")):
                if self.limit is not None and position >= self.limit:
                    return
                yield position, title, sentences

    def records(self) -> Iterator[Record]:
        for position, title, sentences in self._passages():
            if not isinstance(sentences, list):
                yield Rejected(
                    reason=f"{title}: sentences is not a list", raw=repr(sentences)[:4000]
                )
                continue
            yield Document(
                id=passage_id(position), type="passage", title=title, text=_joined(sentences)
            )
        linker = TitleLinker(
            (passage_id(position), title)
            for position, title, sentences in self._passages()
            if isinstance(sentences, list)
        )
        for position, _, sentences in self._passages():
            if isinstance(sentences, list):
                source = passage_id(position)
                for target in linker.targets(source, _joined(sentences)):
                    yield Relation(source=source, type=LINK_RELATION, target=target)


def _joined(sentences: list[Any]) -> str:
    return "".join(str(sentence) for sentence in sentences).strip()
