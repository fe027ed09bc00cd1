"""STaRK's construction of relational questions, on any knowledge base kgqr holds.

A question shape comes from the KB's structure and the edges it really has: a relation
between two types, an anchor document at its far end, and a condition that narrows the
answers (a number field below or above a threshold, a categorical field's value, a word
of the text; or a second relation, two hops away). The exact answer set is computed on the
whole KB (kb_snapshot), kept only when it is small (1-20, as STaRK keeps its own), and the
question is phrased by a deterministic template. Seeded: the same KB and seed give the
same questions, split per shape into train / val / test.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from workbench.questions.kb_snapshot import KbSnapshot, SnapshotDocument

Kind = Literal["number", "value", "text", "two_hop"]
KINDS: tuple[Kind, ...] = ("number", "two_hop", "value", "text")
MAX_ANSWERS = 20
MIN_EDGES = 20  # a relation between two types seen fewer times gives no shape
SPLITS = (("train", 0.4), ("val", 0.2), ("test", 0.4))
STOPWORDS = frozenset(
    (
        "about",
        "after",
        "also",
        "and",
        "are",
        "been",
        "before",
        "being",
        "but",
        "for",
        "from",
        "had",
        "has",
        "have",
        "her",
        "his",
        "into",
        "its",
        "more",
        "most",
        "not",
        "now",
        "of",
        "off",
        "one",
        "only",
        "our",
        "out",
        "over",
        "rated",
        "released",
        "she",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "under",
        "very",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "will",
        "with",
        "would",
    )
)


@dataclass(frozen=True)
class Shape:
    kind: Kind
    source_type: str
    relation: str
    anchor_type: str
    field: str | None = None
    # two hops: source -relation-> middle -second-> anchor
    middle_type: str | None = None
    second: str | None = None

    @property
    def name(self) -> str:
        path = f"{self.source_type}-{self.relation}->"
        if self.second:
            path += f"{self.middle_type}-{self.second}->"
        path += self.anchor_type
        return f"{path}+{self.field or self.kind}"


@dataclass(frozen=True)
class SynthesizedQuery:
    id: str
    query: str
    answers: list[str]
    category: str
    anchor: str
    split: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "query": self.query,
            "relevant": self.answers,
            "category": self.category,
            "anchor": self.anchor,
            "split": self.split,
        }


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def shapes(snapshot: KbSnapshot, fields: dict[str, list[str]]) -> list[Shape]:
    """Every question shape the KB supports, from its edges and its types' fields."""
    found: list[Shape] = []
    edge_types = {key: n for key, n in snapshot.edge_types().items() if n >= MIN_EDGES}
    for (source, relation, anchor), _count in sorted(edge_types.items()):
        if source == anchor:
            continue  # "products bought with product X" reads poorly and tests nothing new
        sample = snapshot.of_type(source)[:200]
        for name in fields.get(source, []):
            values = [doc.fields.get(name) for doc in sample if name in doc.fields]
            if values and all(_numeric(v) for v in values):
                found.append(Shape("number", source, relation, anchor, name))
            elif values and len({str(v) for v in values}) <= 30:
                found.append(Shape("value", source, relation, anchor, name))
        found.append(Shape("text", source, relation, anchor))
        for (middle, second, far), _ in sorted(edge_types.items()):
            if middle == anchor and far not in (source, middle):
                number = next((s.field for s in found if s.kind == "number"
                               and s.source_type == source), None)  # fmt: skip
                found.append(Shape("two_hop", source, relation, far, number, middle, second))
    return found


def choose_shapes(found: list[Shape], count: int, rng: random.Random) -> list[Shape]:
    """`count` shapes, kinds taken in turn (number, two hops, value, text) so a small
    set still covers every kind the KB has."""
    by_kind = {kind: [s for s in found if s.kind == kind] for kind in KINDS}
    for options in by_kind.values():
        rng.shuffle(options)
    chosen: list[Shape] = []
    while len(chosen) < count and any(by_kind.values()):
        for kind in KINDS:
            if by_kind[kind] and len(chosen) < count:
                chosen.append(by_kind[kind].pop())
    return chosen


def _phrase(relation: str) -> str:
    return relation.replace("_", " ")


def _plural(node_type: str) -> str:
    return node_type + ("es" if node_type.endswith(("s", "x", "ch")) else "s")


class Synthesizer:
    def __init__(self, snapshot: KbSnapshot, seed: int = 0) -> None:
        self.snapshot = snapshot
        self.rng = random.Random(seed)

    def candidates(self, shape: Shape, anchor: str) -> list[SnapshotDocument]:
        """The documents of the shape's type linked to the anchor (through the middle)."""
        kb = self.snapshot
        if shape.second is None:
            ids = kb.sources(anchor, shape.relation)
        else:
            ids = {
                s for m in kb.sources(anchor, shape.second) for s in kb.sources(m, shape.relation)
            }
        docs = (kb.documents.get(i) for i in sorted(ids))
        return [d for d in docs if d is not None and d.type == shape.source_type]

    def one(self, shape: Shape) -> tuple[str, list[str], str] | None:
        """(question, answers, anchor id) for a random anchor, or None when this anchor
        gives no small answer set."""
        anchor = self.rng.choice(self.snapshot.of_type(shape.anchor_type))
        candidates = self.candidates(shape, anchor.id)
        if not candidates:
            return None
        condition = self._condition(shape, candidates)
        if condition is None:
            return None
        text, keep = condition
        answers = [doc.id for doc in candidates if keep(doc)]
        if not 1 <= len(answers) <= MAX_ANSWERS:
            return None
        path = f"are {_phrase(shape.relation)}"
        if shape.second is not None:
            article = "an" if (shape.middle_type or "")[:1] in "aeiou" else "a"
            path += f" {article} {shape.middle_type} {_phrase(shape.second)}"
        question = f"Which {_plural(shape.source_type)} {path} {anchor.title}{text}?"
        return question, answers, anchor.id

    def _condition(
        self, shape: Shape, candidates: list[SnapshotDocument]
    ) -> tuple[str, Callable[[SnapshotDocument], bool]] | None:
        rng = self.rng
        if shape.kind == "text":
            return self._word_condition(candidates)
        if shape.field is None:  # two hops over a type without numbers: the path alone
            return ("", lambda doc: True) if len(candidates) <= MAX_ANSWERS else None
        field = shape.field
        values = [doc.fields[field] for doc in candidates if field in doc.fields]
        if not values:
            return None
        if shape.kind == "value":
            wanted = rng.choice(values)
            return f" with {field} {wanted}", lambda doc: doc.fields.get(field) == wanted
        ordered = sorted({float(v) for v in values})
        if len(ordered) < 2:
            return None
        cut = rng.randint(1, min(len(ordered) - 1, MAX_ANSWERS // 2))
        below = rng.random() < 0.5
        if below:
            threshold = round((ordered[cut - 1] + ordered[cut]) / 2)
            return f" with {field} below {threshold}", lambda doc: _lt(doc, field, threshold)
        threshold = round((ordered[-cut - 1] + ordered[-cut]) / 2)
        return f" with {field} above {threshold}", lambda doc: _gt(doc, field, threshold)

    def _word_condition(
        self, candidates: list[SnapshotDocument]
    ) -> tuple[str, Callable[[SnapshotDocument], bool]] | None:
        words_of = {doc.id: set(re.findall(r"[a-z]{5,}", doc.text.lower())) for doc in candidates}
        pool = sorted({w for words in words_of.values() for w in words} - STOPWORDS)
        self.rng.shuffle(pool)
        for word in pool:
            having = sum(word in words for words in words_of.values())
            if 1 <= having <= MAX_ANSWERS and having < len(candidates):
                return f" described as {word}", lambda doc, w=word: w in words_of[doc.id]
        return None


def _lt(doc: SnapshotDocument, field: str, threshold: float) -> bool:
    value = doc.fields.get(field)
    return _numeric(value) and float(value or 0) < threshold


def _gt(doc: SnapshotDocument, field: str, threshold: float) -> bool:
    value = doc.fields.get(field)
    return _numeric(value) and float(value or 0) > threshold


def synthesize(
    snapshot: KbSnapshot,
    fields: dict[str, list[str]],
    count: int,
    n_shapes: int,
    seed: int,
    progress: Callable[[int], None] = lambda _: None,
) -> tuple[list[Shape], list[SynthesizedQuery]]:
    """About `count` questions over `n_shapes` shapes (equal shares), each question's
    answers exact, split per shape. Shapes that yield too few questions say so by their
    smaller share; none is padded."""
    rng = random.Random(seed)
    chosen = choose_shapes(shapes(snapshot, fields), n_shapes, rng)
    synthesizer = Synthesizer(snapshot, seed)
    queries: list[SynthesizedQuery] = []
    seen: set[str] = set()
    for shape in chosen:
        wanted, tries = count // max(len(chosen), 1), 0
        made: list[SynthesizedQuery] = []
        while len(made) < wanted and tries < wanted * 30:
            tries += 1
            found = synthesizer.one(shape)
            if found is None or found[0] in seen:
                continue
            seen.add(found[0])
            question, answers, anchor = found
            made.append(SynthesizedQuery(f"q{len(queries) + len(made)}", question, answers,
                                         shape.name, anchor))  # fmt: skip
            progress(1)
        queries.extend(_split(made, rng))
    return chosen, queries


def _split(made: list[SynthesizedQuery], rng: random.Random) -> list[SynthesizedQuery]:
    order = list(made)
    rng.shuffle(order)
    out: list[SynthesizedQuery] = []
    start = 0
    for position, (split, share) in enumerate(SPLITS):
        end = len(order) if position == len(SPLITS) - 1 else start + round(share * len(order))
        out.extend(SynthesizedQuery(**{**vars(q), "split": split}) for q in order[start:end])
        start = end
    return out
