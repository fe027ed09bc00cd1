"""Reading the JSON object out of an LLM answer: prose, fences, and the token limit."""

from __future__ import annotations

import pytest

from kgqr_core.llm import parse_json_object
from query_rewriter.strategies.context import documents_from


def test_prose_and_fences_around_the_object_are_skipped() -> None:
    assert parse_json_object('```json\n{"a": {"b": 1}}\n```') == {"a": {"b": 1}}
    assert parse_json_object("no object here") is None
    assert parse_json_object('{broken {"ok": true}') == {"ok": True}
    assert parse_json_object('Sure {here}: {"documents": ["a"]} done') == {"documents": ["a"]}


def test_an_answer_cut_off_mid_document_keeps_the_documents_written_in_full() -> None:
    # The shape of a real hyde answer that hit max_tokens in the HotpotQA eval: before,
    # the parser returned the first complete inner object and the rewrite fell back.
    answer = (
        '{"documents": [{"type": "fields", "passage": {"title": "A", "text": "one, two"}},'
        '{"type": "fields", "passage": {"title": "B", "text": "three"}},'
        '{"type": "fields", "passage": {"title": "C", "text": "four, and the rise of Ki'
    )
    parsed = parse_json_object(answer)
    assert parsed is not None and len(parsed["documents"]) == 2
    assert documents_from(parsed, 3) == ["fields A one, two", "fields B three"]


def test_a_single_document_cut_off_deep_in_its_relations_keeps_what_it_wrote_in_full() -> None:
    # The shape of a real kar answer in a HotpotQA eval: one document whose relations nest
    # ever deeper until max_tokens. No list holds a complete element, so the parser found
    # the document's inner object (no "documents" key) and the rewrite fell back.
    answer = (
        '{"documents": [{"type": "fields", "passage": {"title": "Tampa Bay", "text": "1976"},'
        ' "relations": [{"type": "links_to", "target": {"title": "Lee Roy Selmon", "text": "an'
    )
    parsed = parse_json_object(answer)
    assert parsed == {"documents": [{
        "type": "fields", "passage": {"title": "Tampa Bay", "text": "1976"},
        "relations": [{"type": "links_to", "target": {"title": "Lee Roy Selmon"}}],
    }]}  # fmt: skip
    assert documents_from(parsed, 3) == ["fields Tampa Bay 1976 links_to Lee Roy Selmon"]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ('{"documents": ["a \\" b", "c", "d', {"documents": ['a " b', "c"]}),
        (
            '{"entities": [{"name": "x"}, {"name": "y", "document": "z',
            {"entities": [{"name": "x"}]},
        ),
        ('{"documents": ["a"], "note": [1', {"documents": ["a"]}),
        ('{"documents": ["only one is being writ', None),
        ('{"documents": ["a"}', None),
    ],
)
def test_cut_off_answers_close_after_the_last_complete_element(
    answer: str, expected: dict | None
) -> None:
    assert parse_json_object(answer) == expected
