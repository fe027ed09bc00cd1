"""How KAR writes what it found into the generate prompt.

The paper writes each document triple (d_i, r, d_j) in full, so a seed document with ten
kept neighbours is repeated ten times. On a CPU LLM the prompt's length is most of KAR's
cost (~75 prompt tokens/s), so the default `numbered` form lists every document once and
writes relations between their numbers: the same facts in about half the tokens.
`triples` keeps the paper's form.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

KnowledgeFormat = Literal["numbered", "triples"]
D = TypeVar("D")


@dataclass(frozen=True)
class DocumentRelation:
    """A kept neighbour: seed document --relation--> neighbour document (both by id)."""

    head: str
    relation: str
    tail: str


def render_knowledge(
    documents: Mapping[str, D],
    seeds: list[str],
    relations: list[DocumentRelation],
    as_text: Callable[[D], str],
    form: KnowledgeFormat = "numbered",
) -> str:
    """The knowledge block: seed (entity) documents, then relations to their neighbours.

    `documents` maps id to a document; `as_text` renders one (it truncates). Empty when
    nothing was found.
    """
    if form == "triples" or not relations:  # without relations the numbers refer to nothing
        lines = [f"- {as_text(documents[s])}" for s in seeds]
        lines += [
            f"- ({as_text(documents[r.head])}) --{r.relation}--> ({as_text(documents[r.tail])})"
            for r in relations
        ]
        return "\n".join(lines)
    ends = [end for r in relations for end in (r.head, r.tail)]
    order = list(dict.fromkeys([*seeds, *ends]))
    number = {doc_id: i for i, doc_id in enumerate(order, start=1)}
    lines = [f"[{number[d]}] {as_text(documents[d])}" for d in order]
    lines.append("Relations between these documents:")
    lines += [f"[{number[r.head]}] --{r.relation}--> [{number[r.tail]}]" for r in relations]
    return "\n".join(lines)
