from __future__ import annotations

from typing import Any

from query_rewriter.strategies.knowledge.kar_knowledge import DocumentRelation, render_knowledge

DOCS = {
    "heat": {"title": "Heat", "body": "A 1995 crime film."},
    "mann": {"title": "Michael Mann", "body": "An American director."},
    "pacino": {"title": "Al Pacino", "body": "An American actor."},
}
RELATIONS = [
    DocumentRelation("heat", "directed by", "mann"),
    DocumentRelation("heat", "starring", "pacino"),
]


def as_text(doc: dict[str, Any]) -> str:
    return f"{doc['title']}: {doc['body']}"


def test_numbered_lists_each_document_once_and_relates_their_numbers() -> None:
    text = render_knowledge(DOCS, ["heat"], RELATIONS, as_text, "numbered")
    assert text.splitlines() == [
        "[1] Heat: A 1995 crime film.",
        "[2] Michael Mann: An American director.",
        "[3] Al Pacino: An American actor.",
        "Relations between these documents:",
        "[1] --directed by--> [2]",
        "[1] --starring--> [3]",
    ]
    assert text.count("A 1995 crime film.") == 1


def test_triples_write_the_papers_document_triples_in_full() -> None:
    text = render_knowledge(DOCS, ["heat"], RELATIONS, as_text, "triples")
    assert text.splitlines() == [
        "- Heat: A 1995 crime film.",
        "- (Heat: A 1995 crime film.) --directed by--> (Michael Mann: An American director.)",
        "- (Heat: A 1995 crime film.) --starring--> (Al Pacino: An American actor.)",
    ]


def test_numbered_is_shorter_when_a_seed_has_several_neighbours() -> None:
    numbered = render_knowledge(DOCS, ["heat"], RELATIONS, as_text, "numbered")
    triples = render_knowledge(DOCS, ["heat"], RELATIONS, as_text, "triples")
    assert len(numbered) < len(triples)


def test_without_relations_both_forms_list_the_entity_documents_alike() -> None:
    numbered = render_knowledge(DOCS, ["heat", "mann"], [], as_text, "numbered")
    assert numbered == render_knowledge(DOCS, ["heat", "mann"], [], as_text, "triples")
    assert numbered == "- Heat: A 1995 crime film.\n- Michael Mann: An American director."


def test_a_neighbour_that_is_also_a_seed_keeps_its_number() -> None:
    relations = [DocumentRelation("heat", "directed by", "mann")]
    text = render_knowledge(DOCS, ["heat", "mann"], relations, as_text, "numbered")
    assert text.splitlines()[-1] == "[1] --directed by--> [2]"
    assert text.count("Michael Mann:") == 1
