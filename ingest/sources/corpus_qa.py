"""The multi-hop QA corpora in ../shared/data: MuSiQue (with its third-party OpenIE KG)
and HotpotQA (with a title-link graph built here, as document relations or as a corpus
KG). Passages are keyed by position (``p0``, ``p1``, ...) because titles repeat.

MuSiQue's ``openie_*.json`` lists, per passage in corpus order, the entities and
(head, relation, tail) triples GPT-3.5 extracted: a corpus-centric KG in KG-CQR's style.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

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
from ingest.sources.base import Source, set_aside_unless_valid
from ingest.title_links import RELATION as LINK_RELATION
from ingest.title_links import TitleLinker
from kgqr_core.ids import passage_id
from plugin.kb_meta import DocumentStructure

PASSAGE_STRUCTURE = DocumentStructure(types={"passage": ["title", "text"]})
MENTIONS_RELATION = "mentions"


class MusiqueSource(Source):
    kind = "musique"
    folder_files = ("corpus.json",)

    def structure(self) -> DocumentStructure:
        return PASSAGE_STRUCTURE

    def _openie_file(self) -> Path | None:
        return next(iter(sorted(self.path.glob("openie_*.json"))), None)

    def records(self) -> Iterator[Record]:
        set_aside: set[int] = set()
        with (self.path / "corpus.json").open("rb") as corpus:
            for position, passage in enumerate(ijson.items(corpus, "item")):
                if self.limit is not None and position >= self.limit:
                    break
                fields = passage if isinstance(passage, dict) else {}
                made = set_aside_unless_valid(
                    f"corpus.json item {position}", passage, Document, id=passage_id(position),
                    type="passage", title=fields.get("title"), text=fields.get("text"),
                )  # fmt: skip
                if not isinstance(made, Document):
                    set_aside.add(position)
                yield made
        openie = self._openie_file()
        if openie is not None:
            yield from self._graph(openie, set_aside)

    def _graph(self, openie: Path, set_aside: set[int]) -> Iterator[Record]:
        """The OpenIE graph of each passage kept: one set aside gets no entities or
        triples (written, they made a node without a document, which verify fails)."""
        with openie.open("rb") as stream:
            for position, doc in enumerate(array_items(stream, "docs")):
                if self.limit is not None and position >= self.limit:
                    break
                if position not in set_aside:
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


def _passage_graph(pid: str, doc: Any) -> Iterator[Record]:
    """A passage's OpenIE entities and triples, each that cannot be a record set aside
    with why (a name over 512 characters stopped the whole read; an item not an object,
    an AttributeError)."""
    if not isinstance(doc, dict):
        yield Rejected(reason=f"{pid}: OpenIE item is not an object", raw=repr(doc)[:4000])
        return
    entities, triples = doc.get("extracted_entities"), doc.get("extracted_triples")
    for name, value in (("extracted_entities", entities), ("extracted_triples", triples)):
        if value is not None and not isinstance(value, list):
            yield Rejected(reason=f"{pid}: OpenIE {name} is not a list", raw=repr(value)[:4000])
    named = entities if isinstance(entities, list) else []
    for other in (name for name in named if not isinstance(name, str)):
        yield Rejected(reason=f"{pid}: OpenIE entity is not a string", raw=repr(other)[:4000])
    for entity in dict.fromkeys(name for name in named if isinstance(name, str)):
        if entity.strip():
            yield set_aside_unless_valid(f"{pid}: entity", entity, Mention,
                                         passage_id=pid, entity=entity.strip())  # fmt: skip
    for triple in triples if isinstance(triples, list) else []:
        if (
            isinstance(triple, list)
            and len(triple) == 3
            and all(isinstance(part, str) and part.strip() for part in triple)
        ):
            head, relation, tail = (part.strip() for part in triple)
            yield set_aside_unless_valid(
                f"{pid}: triple", triple, CorpusTriple,
                head=head, relation=relation, tail=tail, passage_id=pid,
            )  # fmt: skip
        else:
            yield Rejected(
                reason=f"{pid}: malformed triple: extracted_triples holds [head, relation, "
                "tail], three non-empty strings",
                raw=repr(triple)[:4000],
            )


class HotpotQaPassage(NamedTuple):
    id: str
    title: str
    sentences: Any  # a list of sentences when the record is well-formed


class HotpotQaSource(Source):
    """HotpotQA passages, then `links_to` relations between passages whose text names
    another's title (see ingest.title_links); the file is read once per pass, never held."""

    kind = "hotpotqa"
    folder_files = ("corpus.json",)

    def structure(self) -> DocumentStructure:
        return PASSAGE_STRUCTURE

    def _passages(self) -> Iterator[HotpotQaPassage]:
        with (self.path / "corpus.json").open("rb") as corpus:
            for position, (title, sentences) in enumerate(ijson.kvitems(corpus, "")):
                if self.limit is not None and position >= self.limit:
                    return
                yield HotpotQaPassage(passage_id(position), title, sentences)

    def records(self) -> Iterator[Record]:
        kept: set[str] = set()
        for passage in self._passages():
            made = _passage_document(passage)
            if isinstance(made, Document):
                kept.add(passage.id)
            yield made
        # Only the passages ingested as documents are linked: a link to one set aside made
        # a node without a document.
        linker = TitleLinker((p.id, p.title) for p in self._passages() if p.id in kept)
        for passage in self._passages():
            if passage.id in kept:
                yield from self._links(passage, linker)

    def _links(self, passage: HotpotQaPassage, linker: TitleLinker) -> Iterator[Record]:
        # Read from the passage's text, as a triple is: a caller not shown that text must
        # not follow it (strategies/text_facts.py).
        for target in linker.targets(passage.id, _joined(passage.sentences)):
            yield Relation(source=passage.id, type=LINK_RELATION, target=target,
                           properties={"passage_id": passage.id})  # fmt: skip


def _passage_document(passage: HotpotQaPassage) -> Record:
    if not isinstance(passage.sentences, list):
        return Rejected(
            reason=f"{passage.title}: sentences is not a list", raw=repr(passage.sentences)[:4000]
        )
    return set_aside_unless_valid(
        f"corpus.json passage {passage.id}", passage.title, Document,
        id=passage.id, type="passage", title=passage.title, text=_joined(passage.sentences),
    )  # fmt: skip


class HotpotQaGraphSource(HotpotQaSource):
    """HotpotQA with the same title links written as a corpus KG for KG-CQR instead of
    document relations: entities are titles, each link a (title, mentions, title) triple
    whose TTR is the sentence that names the target, prefixed with the source's title.

    KG-CQR's TTRs are LLM-written from the passage, which over HotpotQA's 994 passages costs
    about 15 hours on this machine's CPU; the naming sentence is the extractive stand-in.
    A passage mentions its own title's entity and every title it names.
    """

    kind = "hotpotqa-kg"

    def _links(self, passage: HotpotQaPassage, linker: TitleLinker) -> Iterator[Record]:
        own = set_aside_unless_valid(f"{passage.id}: title", passage.title, Mention,
                                     passage_id=passage.id, entity=passage.title)  # fmt: skip
        yield own
        if isinstance(own, Rejected):  # a title no entity can hold names no link either
            return
        # Entities are titles, so passages sharing one are one entity: its own title is no
        # link, and one triple per tail title, since the triple id is (passage, head, tail).
        named = {passage.title}
        for sentence in map(str, passage.sentences):
            for target in linker.targets(passage.id, sentence):
                tail = linker.title(target)
                if tail in named:
                    continue
                named.add(tail)
                where = f"{passage.id}: link to {tail[:100]!r}"
                yield set_aside_unless_valid(where, tail, Mention, passage_id=passage.id,
                                             entity=tail)  # fmt: skip
                yield set_aside_unless_valid(
                    where, sentence, CorpusTriple, head=passage.title,
                    relation=MENTIONS_RELATION, tail=tail, passage_id=passage.id,
                    ttr=f"{passage.title}: {sentence.strip()}", ttr_source="given",
                )  # fmt: skip


def _joined(sentences: list[Any]) -> str:
    return "".join(str(sentence) for sentence in sentences).strip()
