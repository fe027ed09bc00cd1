"""KG-CQR's graph construction for passages that come without a graph.

Two LLM calls per passage: one extracts (head, relation, tail) triples, one writes a
textual triplet representation (TTR) for each from the passage (KG-CQR Eq. 2). The paper
writes one TTR per call; batching a passage's triples into one call keeps the cost at two
calls per passage on a CPU-only LLM. Answers are cached, so a re-run costs nothing.
A malformed answer yields no triples (and, for TTRs, template sentences) rather than
failing the passage.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import ValidationError

from ingest.records import CorpusTriple, Document, Mention, unstorable
from kgqr_core.llm import LlmClient, LlmRequest, parse_json_object
from kgqr_core.prompts import render

MAX_TRIPLES = 12
MAX_PASSAGE_CHARS = 2_000


@dataclass
class Extraction:
    triples: list[CorpusTriple] = field(default_factory=list)
    mentions: list[Mention] = field(default_factory=list)
    llm_calls: int = 0
    cached_calls: int = 0
    problems: list[str] = field(default_factory=list)


def parse_triples(answer: str) -> list[tuple[str, str, str]]:
    """Well-formed triples from an extraction answer; anything else is dropped."""
    parsed = parse_json_object(answer) or {}
    items = parsed.get("triples")
    triples = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, list | tuple) and len(item) == 3:
            parts = tuple(str(part).strip() for part in item)
            if all(parts):
                triples.append((parts[0], parts[1], parts[2]))
    return list(dict.fromkeys(triples))


def parse_sentences(answer: str, expected: int) -> list[str] | None:
    parsed = parse_json_object(answer) or {}
    sentences = parsed.get("sentences")
    if not isinstance(sentences, list) or len(sentences) != expected:
        return None
    cleaned = [str(sentence).strip() for sentence in sentences]
    return cleaned if all(cleaned) else None


def extract(llm: LlmClient, passage: Document) -> Extraction:
    result = Extraction()
    text = passage.body()[:MAX_PASSAGE_CHARS]
    prompt = render(
        "kgcqr_extract_triples", title=passage.title, text=text, max_triples=MAX_TRIPLES
    )
    answer = llm.complete(LlmRequest.user(prompt, json_mode=True, max_tokens=600))
    result.llm_calls += 1
    result.cached_calls += int(answer.cached)
    found = _storable(passage.id, parse_triples(answer.texts[0])[:MAX_TRIPLES], result.problems)
    if not found:
        result.problems.append(f"{passage.id}: the LLM returned no usable triples")
        return result
    numbered = "\n".join(f"{i}. ({t.head}; {t.relation}; {t.tail})"
                         for i, t in enumerate(found, start=1))  # fmt: skip
    ttr_prompt = render("kgcqr_ttr", title=passage.title, text=text, triples=numbered)
    ttr_answer = llm.complete(LlmRequest.user(ttr_prompt, json_mode=True, max_tokens=900))
    result.llm_calls += 1
    result.cached_calls += int(ttr_answer.cached)
    sentences = parse_sentences(ttr_answer.texts[0], len(found))
    if sentences is None:
        result.problems.append(f"{passage.id}: TTR answer unusable; template sentences used")
    for position, triple in enumerate(found):
        written = sentences[position] if sentences is not None else None
        if written is not None and unstorable(written) is None:
            triple.ttr, triple.ttr_source = written, "llm"
        else:  # none, or one no store takes (half a surrogate): the template's
            triple.ttr, triple.ttr_source = triple.template_ttr(), "template"
        result.triples.append(triple)
    entities = dict.fromkeys(name for t in found for name in (t.head, t.tail))
    result.mentions = [Mention(passage_id=passage.id, entity=name) for name in entities]
    return result


def _storable(
    passage_id: str, found: list[tuple[str, str, str]], problems: list[str]
) -> list[CorpusTriple]:
    """The triples a record, and both stores, can hold; the rest said in `problems`. Checked
    before the second prompt too: the LLM's client cannot even send half a surrogate, and
    a name over 512 characters, or such text, failed the whole chunk for good, from the
    cached answer."""
    kept = []
    for head, relation, tail in found:
        try:
            triple = CorpusTriple(head=head, relation=relation, tail=tail, passage_id=passage_id)
        except ValidationError as exc:
            problems.append(f"{passage_id}: a triple set aside: {exc.errors()[0]['msg']}")
            continue
        if (problem := unstorable([head, relation, tail])) is not None:
            problems.append(f"{passage_id}: a triple set aside: {problem}")
            continue
        kept.append(triple)
    return kept
