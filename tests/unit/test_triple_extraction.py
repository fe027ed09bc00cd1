"""Prompt assembly and answer parsing of KG-CQR graph construction, with a scripted LLM."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from ingest.records import Document
from ingest.triple_extraction import extract, parse_triples
from kgqr_core.llm import CACHE_PREFIX, LlmAnswer, LlmRequest


@dataclass
class ScriptedLlm:
    answers: list[str]
    prompts: list[str] = field(default_factory=list)

    def complete(self, request: LlmRequest) -> LlmAnswer:
        self.prompts.append(request.messages[-1][1])
        assert request.json_mode
        return LlmAnswer([self.answers.pop(0)], cached=False, elapsed_ms=1.0)


PASSAGE = Document(
    id="p7", type="passage", title="Heat (1995 film)",
    text="Heat is a 1995 crime film directed by Michael Mann, starring Al Pacino.",
)  # fmt: skip


def test_extraction_then_ttr_with_passage_in_both_prompts() -> None:
    llm = ScriptedLlm([
        '{"triples": [["Heat", "directed by", "Michael Mann"], ["Heat", "starring", "Al Pacino"]]}',
        '{"sentences": ["Heat (1995) was directed by Michael Mann.", "Al Pacino stars in Heat."]}',
    ])  # fmt: skip
    result = extract(llm, PASSAGE)  # type: ignore[arg-type]
    assert [(t.head, t.relation, t.tail) for t in result.triples] == [
        ("Heat", "directed by", "Michael Mann"), ("Heat", "starring", "Al Pacino"),
    ]  # fmt: skip
    assert [t.ttr_source for t in result.triples] == ["llm", "llm"]
    assert result.triples[0].ttr == "Heat (1995) was directed by Michael Mann."
    assert {m.entity for m in result.mentions} == {"Heat", "Michael Mann", "Al Pacino"}
    assert "directed by Michael Mann" in llm.prompts[0]
    assert "1. (Heat; directed by; Michael Mann)" in llm.prompts[1]
    assert result.llm_calls == 2


def test_unusable_ttr_answer_falls_back_to_template_sentences() -> None:
    llm = ScriptedLlm(['{"triples": [["Heat", "released in", "1995"]]}', "sorry, I cannot"])
    result = extract(llm, PASSAGE)  # type: ignore[arg-type]
    assert result.triples[0].ttr == "Heat released in 1995."
    assert result.triples[0].ttr_source == "template"
    assert result.problems


def test_no_triples_means_no_second_call() -> None:
    llm = ScriptedLlm(["not json"])
    result = extract(llm, PASSAGE)  # type: ignore[arg-type]
    assert result.triples == [] and result.llm_calls == 1


def test_parse_triples_drops_malformed_items_and_duplicates() -> None:
    answer = (
        'Here you go: {"triples": [["a", "b", "c"], ["a", "b"], ["", "x", "y"], '
        '["a", "b", "c"], [1, 2, 3]]} hope it helps'
    )
    assert parse_triples(answer) == [("a", "b", "c"), ("1", "2", "3")]


def test_llm_cache_key_depends_on_model_and_request() -> None:
    request = LlmRequest.user("hello", json_mode=True)
    assert request.cache_key("m1") == LlmRequest.user("hello", json_mode=True).cache_key("m1")
    assert request.cache_key("m1") != request.cache_key("m2")
    assert request.cache_key("m1") != LlmRequest.user("hello").cache_key("m1")


def test_another_sample_is_another_draw_only_of_a_sampled_answer() -> None:
    """Sample 0 is the key answers were cached under before samples existed; a greedy
    (temperature 0) answer is one answer, however many samples ask for it."""
    sampled = LlmRequest.user("write a passage", temperature=0.7)
    first = hashlib.sha256(
        json.dumps(["m1", (("user", "write a passage"),), False, 1, 512, 0.7]).encode()
    ).hexdigest()
    assert sampled.cache_key("m1") == sampled.cache_key("m1", 0) == CACHE_PREFIX + first
    assert len({sampled.cache_key("m1", sample) for sample in (0, 1, 2)}) == 3
    greedy = LlmRequest.user("write a passage")
    assert greedy.cache_key("m1", 1) == greedy.cache_key("m1", 0)


def test_what_the_llm_writes_that_no_store_takes_is_set_aside_triple_by_triple() -> None:
    """A name over 512 characters, or half an emoji's escape, failed the whole chunk, for
    good, since the answer is cached; `"triples": 5` was a TypeError."""
    long_name = "x" * 600
    llm = ScriptedLlm([
        json.dumps({"triples": [["Heat", "directed by", "Michael Mann"],
                                ["Heat", "starring", long_name], ["Heat", "rated", "\ud83d"]]}),
        json.dumps({"sentences": ["Mann directed \ud83d Heat."]}),
    ])  # fmt: skip
    result = extract(llm, PASSAGE)  # type: ignore[arg-type]
    assert [(t.head, t.tail) for t in result.triples] == [("Heat", "Michael Mann")]
    # The second prompt names the kept triple only (the LLM's client cannot send half a
    # surrogate), and a sentence no store takes gives way to the template's.
    llm.prompts[1].encode("utf-8")
    assert "1. (Heat; directed by; Michael Mann)" in llm.prompts[1] and "2. (" not in llm.prompts[1]
    assert result.triples[0].ttr_source == "template"
    assert {m.entity for m in result.mentions} == {"Heat", "Michael Mann"}
    assert sum("a triple set aside" in problem for problem in result.problems) == 2
    assert parse_triples('{"triples": 5}') == []
