"""The agent's plan language: what validation refuses, how templates are filled, and how a
filter compares (the executor itself runs against real services in test_agent.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from plugin.kb_meta import DocumentStructure
from query_rewriter.strategies.agent.executor import matches, read_as_caller
from query_rewriter.strategies.agent.plan import (
    MAX_K,
    MAX_STEPS,
    PlanError,
    fill,
    parse,
    repair,
    validate,
)
from workbench.questions.phrasing import keeps_facts

STRUCTURE = DocumentStructure(
    types={"movie": ["year", "genre"], "person": []}, relations=["directed_by", "starring"]
)
GOOD: dict[str, Any] = {
    "steps": [
        {"id": "who", "op": "search", "text": "{query}", "type": "person", "k": 1, "by": "name"},
        {"id": "films", "op": "follow", "from": "who", "relation": "directed_by",
         "direction": "in", "type": "movie"},
        {"id": "recent", "op": "filter", "from": "films", "field": "year", "cmp": "{cmp}",
         "value": "{number}"},
        {"id": "best", "op": "rank", "from": "recent", "text": "{query}"},
    ]
}  # fmt: skip


def _with(step: int, **changes: Any) -> dict[str, Any]:
    steps = [dict(s) for s in GOOD["steps"]]
    steps[step].update(changes)
    return {"steps": steps}


def test_a_good_template_fills_and_validates() -> None:
    plan = validate(fill(GOOD, "Films directed by Michael Mann after 1998"), STRUCTURE)
    recent = plan.steps[2].model_dump()
    assert recent["cmp"] == "gt" and recent["value"] == 1998.0
    assert plan.steps[0].model_dump()["text"] == "Films directed by Michael Mann after 1998"
    assert plan.answer_step == "best"
    below = validate(fill(GOOD, "Films by Michael Mann released before 2000"), STRUCTURE)
    assert below.steps[2].model_dump()["cmp"] == "lt"


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        (_with(0, type="planet"), "no type 'planet'"),
        (_with(1, relation="produced_by"), "no relation 'produced_by'"),
        (_with(2, field="budget"), "no field 'budget'"),
        (_with(3, **{"from": "nowhere"}), "reads 'nowhere', which no earlier step made"),
        (_with(1, id="who"), "the id is used twice"),
    ],
)
def test_validation_names_what_the_kb_lacks(template: dict[str, Any], reason: str) -> None:
    with pytest.raises(PlanError, match=reason):
        validate(fill(template, "Films by Michael Mann after 1998"), STRUCTURE)


@pytest.mark.parametrize(
    "raw",
    [
        {"steps": [{"id": f"s{i}", "op": "search", "text": "x"} for i in range(MAX_STEPS + 1)]},
        {"steps": [{"id": "s", "op": "search", "text": "x", "k": MAX_K + 1}]},
        {"steps": [{"id": "s", "op": "eval", "code": "__import__('os')"}]},
        {"steps": [{"id": "s", "op": "search", "text": "x", "cypher": "MATCH (n) DELETE n"}]},
        {"steps": []},
        "not json at all",
    ],
)
def test_over_budget_or_unknown_operations_are_refused(raw: Any) -> None:
    with pytest.raises(PlanError, match="not a plan"):
        parse(raw)


def test_a_template_asked_without_its_number_is_refused() -> None:
    with pytest.raises(PlanError, match=re.escape("no {number}")):
        fill(GOOD, "Films directed by Michael Mann")


def test_a_filled_comparison_that_is_no_comparison_is_refused() -> None:
    with pytest.raises(PlanError, match="cmp"):
        fill(_with(2, cmp="roughly"), "Films by Michael Mann after 1998")


@pytest.mark.parametrize(
    ("cmp", "value", "wanted", "expected"),
    [
        ("lt", 1995, 1998.0, True),
        ("gt", 1995, 1998.0, False),
        ("gte", "1998", 1998, True),  # numbers stored as text compare as numbers
        ("eq", "Crime", "crime", True),
        ("ne", "crime", "drama", True),
        ("contains", "crime thriller", "THRILL", True),
        ("lt", "crime", 3, False),  # text never orders against a number
        ("eq", ["drama", "crime"], "crime", True),  # a list matches when one item does
    ],
)
def test_filter_comparisons(cmp: str, value: Any, wanted: Any, expected: bool) -> None:
    assert matches(cmp, value, wanted, set()) is expected


def test_mentioned_keeps_values_the_question_names() -> None:
    words = {"films", "in", "oak", "and", "red"}
    assert matches("mentioned", "oak", None, words)
    assert not matches("mentioned", "solid oak", None, words)
    assert not matches("mentioned", "", None, words)


def test_a_small_models_slips_are_repaired_before_validation() -> None:
    written = {
        "steps": [
            {"id": "who", "op": "search", "text": "{query}", "type": "person"},
            {"id": "films", "from": "who", "relation": "directed_by", "direction": "in"},
            {"id": "filter", "from": "films", "field": "year", "cmp": ">=", "value": "{number}"},
            {"id": "rank", "from": "filter", "text": "{query}"},
            {"id": "top", "from": "rank", "k": 5},
        ]
    }
    plan = validate(fill(repair(written), "Films by Michael Mann after 1998"), STRUCTURE)
    assert [step.op for step in plan.steps] == ["search", "follow", "filter", "rank", "limit"]
    assert plan.steps[2].model_dump()["cmp"] == "gte"
    # What cannot be read as a plan stays unrepaired, for validation to refuse.
    assert repair(["not", "a", "plan"]) == ["not", "a", "plan"]
    with pytest.raises(PlanError):
        parse(repair({"steps": [{"id": "x", "from": "y", "cmp": "about"}]}))


def test_a_paraphrase_is_kept_only_with_the_anchor_and_every_number() -> None:
    original = "Which products are made by Varnok with price below 40?"
    assert keeps_facts(original, "Varnok products cheaper than 40?", "Varnok")
    assert not keeps_facts(original, "Cheap Varnok products?", "Varnok")  # the number lost
    assert not keeps_facts(original, "Products under 40 by that brand", "Varnok")
    assert not keeps_facts(original, "Varnok products under 400?", "Varnok")  # not 40


@pytest.mark.parametrize(
    ("last", "read_back"),
    [
        ({"id": "z", "op": "limit", "from": "films", "k": 3}, True),  # Neo4j's, unread
        ({"id": "z", "op": "rank", "from": "films", "text": "x"}, False),
        ({"id": "z", "op": "filter", "from": "films", "field": "year", "cmp": "gt", "value": 1},
         False),
        ({"id": "z", "op": "union", "of": ["who", "films"]}, True),
        ({"id": "z", "op": "intersect", "of": ["who", "films"]}, False),
    ],
)  # fmt: skip
def test_a_plan_whose_answer_comes_from_neo4j_is_read_back_as_the_caller(
    last: dict[str, Any], read_back: bool
) -> None:
    steps = [dict(s) for s in GOOD["steps"][:2]]
    plan = validate(parse({"steps": [*steps, last]}), STRUCTURE)
    assert read_as_caller(plan)[plan.answer_step] is not read_back


@pytest.mark.parametrize(
    ("question", "cmp", "number"),
    [
        ("Products by Tasa with a manufacturing year prior to 2007", "lt", 2007.0),
        ("Products by Briaxhel with a production year exceeding 2014?", "gt", 2014.0),
        ("Products by Testabri made before January 1, 2015", "lt", 2015.0),
        ("Products by Sabri priced under 5 dollars", "lt", 5.0),
        ("Films by Michael Mann after 1998", "gt", 1998.0),
    ],
)
def test_the_comparison_and_its_number_are_read_as_a_person_writes_them(
    question: str, cmp: str, number: float
) -> None:
    plan = validate(fill(GOOD, question), STRUCTURE)
    assert plan.steps[2].model_dump()["cmp"] == cmp
    assert plan.steps[2].model_dump()["value"] == number
