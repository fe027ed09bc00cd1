"""The agent's plan language: a JSON list of typed steps over a knowledge base's operations.

An LLM writes plans (templates) offline; kgqr validates them against the KB's structure
and runs them itself. Nothing the model writes is ever evaluated as code: a plan is data,
every name in it is checked against the KB's types, fields and relations, and every value
reaches Neo4j and OpenSearch as a query parameter.

    {"steps": [
      {"id": "brand", "op": "search", "text": "{query}", "type": "brand", "k": 3},
      {"id": "made", "op": "follow", "from": "brand", "relation": "made_by",
       "direction": "in", "type": "product"},
      {"id": "cheap", "op": "filter", "from": "made", "field": "price", "cmp": "lt",
       "value": "{number}"},
      {"id": "best", "op": "rank", "from": "cheap", "text": "{query}"}
    ]}

Operations (each step's result is a ranked list of document ids):
- ``search``: the KB's hybrid search for ``text``, ``type`` optional, top ``k``; with
  ``"by": "name"``, the documents whose titles the text names (BM25 on titles).
- ``follow``: the documents one ``relation`` away from ``from``'s, ``out`` (from -> to),
  ``in`` (to <- from) or ``both``, ``type`` optional.
- ``filter``: keep ``from``'s documents whose ``field`` compares (``eq ne lt lte gt gte
  contains``) with ``value``; ``mentioned``: whose field value the query names.
- ``rank``: ``from``'s documents ordered by the KB's hybrid search for ``text``.
- ``union`` / ``intersect``: of the steps listed in ``of``.
- ``limit``: ``from``'s first ``k``.
The plan's answer is its last step (or ``output``).

Slots, filled from the query when a template runs: ``{query}`` (its text), ``{number}``,
``{number2}`` (its first and second numbers), ``{cmp}`` (``lt`` when it says below, under,
less, before; ``gt`` for above, over, more, after; else ``eq``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from plugin.kb_meta import DocumentStructure

MAX_STEPS = 12
MAX_K = 200
StepId = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,31}$")]
SlotText = Annotated[str, Field(min_length=1, max_length=500)]
Comparison = Literal["eq", "ne", "lt", "lte", "gt", "gte", "contains", "mentioned"]


class _Step(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: StepId


class Search(_Step):
    op: Literal["search"]
    text: SlotText
    type: str | None = None
    k: int = Field(default=10, ge=1, le=MAX_K)
    # hybrid: the KB's own search; name: the documents whose title the text names (BM25 on
    # titles alone, so a made-up brand name is not outweighed by what the rest means)
    by: Literal["hybrid", "name"] = "hybrid"


class Follow(_Step):
    op: Literal["follow"]
    from_: StepId = Field(alias="from")
    relation: str
    direction: Literal["out", "in", "both"] = "out"
    type: str | None = None


class Filter(_Step):
    op: Literal["filter"]
    from_: StepId = Field(alias="from")
    field: str
    cmp: Comparison
    value: str | float | int | bool | None = None

    @model_validator(mode="after")
    def _value_given(self) -> Filter:
        if self.cmp != "mentioned" and self.value is None:
            raise ValueError(f"filter {self.id!r}: {self.cmp} needs a value")
        return self


class Rank(_Step):
    op: Literal["rank"]
    from_: StepId = Field(alias="from")
    text: SlotText


class Combine(_Step):
    op: Literal["union", "intersect"]
    of: list[StepId] = Field(min_length=2, max_length=6)


class Limit(_Step):
    op: Literal["limit"]
    from_: StepId = Field(alias="from")
    k: int = Field(ge=1, le=MAX_K)


Step = Annotated[Search | Follow | Filter | Rank | Combine | Limit, Field(discriminator="op")]


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")
    steps: list[Step] = Field(min_length=1, max_length=MAX_STEPS)
    output: StepId | None = None

    @property
    def answer_step(self) -> str:
        return self.output or self.steps[-1].id

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


class PlanError(ValueError):
    """A plan that cannot run on this KB; the message names the step and the reason."""


def inputs(step: Step) -> list[str]:
    if isinstance(step, Combine):
        return list(step.of)
    return [step.from_] if isinstance(step, Follow | Filter | Rank | Limit) else []


def parse(raw: Any) -> Plan:
    """A plan from JSON (a string or decoded), or PlanError with every reason."""
    try:
        if isinstance(raw, str | bytes):
            return Plan.model_validate_json(raw)
        return Plan.model_validate(raw)
    except ValidationError as exc:
        reasons = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'plan'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise PlanError(f"not a plan: {reasons}") from exc


def validate(plan: Plan, structure: DocumentStructure) -> Plan:
    """The plan if every step reads only earlier steps and names only the KB's types,
    relations and fields; else PlanError. A KB without recorded types accepts any type
    (passages), never an unknown relation or field."""
    seen: set[str] = set()
    fields = {field for names in structure.types.values() for field in names}
    for step in plan.steps:
        where = f"step {step.id!r} ({step.op})"
        if step.id in seen:
            raise PlanError(f"{where}: the id is used twice")
        unknown = [name for name in inputs(step) if name not in seen]
        if unknown:
            raise PlanError(f"{where}: reads {unknown[0]!r}, which no earlier step made")
        node_type = getattr(step, "type", None)
        if node_type is not None and structure.types and node_type not in structure.types:
            raise PlanError(
                f"{where}: no type {node_type!r} in this KB (types: {', '.join(structure.types)})"
            )
        if isinstance(step, Follow) and step.relation not in structure.relations:
            known = ", ".join(structure.relations) or "none"
            raise PlanError(f"{where}: no relation {step.relation!r} (relations: {known})")
        if isinstance(step, Filter) and step.field not in fields:
            raise PlanError(
                f"{where}: no field {step.field!r} (fields: {', '.join(sorted(fields))})"
            )
        seen.add(step.id)
    if plan.output is not None and plan.output not in seen:
        raise PlanError(f"output {plan.output!r} is not a step")
    return plan


NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")
SLOT = re.compile(r"\{(query|number2?|cmp)\}")
LESS = frozenset(
    {"below", "under", "less", "before", "cheaper", "fewer", "lower", "prior", "earlier", "older"}
)
MORE = frozenset(
    {"above", "over", "more", "after", "greater", "higher", "since", "exceeding", "exceeds",
     "beyond", "later", "newer"}
)  # fmt: skip


def comparison(query: str) -> tuple[str, int]:
    """The comparison the query asks for and where its word ends (0 when there is none)."""
    for word in re.finditer(r"\w+", query.lower()):
        if word.group() in LESS or word.group() in MORE:
            return ("lt" if word.group() in LESS else "gt"), word.end()
    return "eq", 0


def slot_values(query: str) -> dict[str, str]:
    """What the template slots stand for in this query. `{number}` is the comparison's
    number: the first of two or more digits after its word ("before January 1, 2015" ->
    2015), else the first after it, else the query's first."""
    cmp, end = comparison(query)
    numbers = NUMBER.findall(query)
    after = NUMBER.findall(query[end:]) if end else []
    values = {"query": query, "cmp": cmp}
    chosen = next((n for n in after if len(n.split(".")[0]) >= 2), after[0] if after else None)
    if chosen is not None:
        values["number"] = chosen
    elif numbers:
        values["number"] = numbers[0]
    if len(numbers) >= 2:
        values["number2"] = numbers[1]
    return values


def fill(template: dict[str, Any], query: str) -> Plan:
    """The template (a plan's JSON, slots unfilled: `{cmp}` is no comparison yet) with its
    slots replaced by the query's values, parsed; PlanError when the query lacks one (a
    template for "under $50" asked without a number) or the result is no plan."""
    values = slot_values(query)

    def replace(value: Any) -> Any:
        if isinstance(value, str):
            whole = SLOT.fullmatch(value)
            if whole and whole.group(1).startswith("number"):
                if whole.group(1) not in values:
                    raise PlanError(f"the query has no {{{whole.group(1)}}} for the template")
                return float(values[whole.group(1)])
            return SLOT.sub(lambda m: _slot(values, m.group(1)), value)
        if isinstance(value, list):
            return [replace(item) for item in value]
        if isinstance(value, dict):
            return {key: replace(item) for key, item in value.items()}
        return value

    return parse(replace(template))


def _slot(values: dict[str, str], name: str) -> str:
    if name not in values:
        raise PlanError(f"the query has no {{{name}}} for the template")
    return values[name]


SYMBOLS = {"<": "lt", "<=": "lte", ">": "gt", ">=": "gte", "=": "eq", "==": "eq", "!=": "ne"}


def repair(raw: Any) -> Any:
    """An LLM's plan with the slips a small model makes undone before validation: a step
    without its "op" (inferred from the keys it has, as a reader would) and comparisons
    written as symbols. Anything else is left for `parse` and `validate` to judge."""
    if not isinstance(raw, dict) or not isinstance(raw.get("steps"), list):
        return raw
    steps = []
    for step in raw["steps"]:
        if isinstance(step, dict):
            step = dict(step)
            if "op" not in step:
                step["op"] = _inferred_op(step)
            if isinstance(step.get("cmp"), str) and step["cmp"].strip() in SYMBOLS:
                step["cmp"] = SYMBOLS[step["cmp"].strip()]
        steps.append(step)
    return {**raw, "steps": steps}


def _inferred_op(step: dict[str, Any]) -> Any:
    if "relation" in step:
        return "follow"
    if "field" in step or "cmp" in step:
        return "filter"
    if "of" in step:
        return "union"
    if "from" in step:
        return "rank" if "text" in step else "limit"
    return "search" if "text" in step else step.get("id")
