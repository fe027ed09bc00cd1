"""How a training question's words reach its true answers over the graph, and the plan
templates those paths suggest.

AvaTaR's comparator tells the LLM *why* a plan missed; on a small local LLM that feedback
has to be concrete. For a missed question kgqr finds the nodes the question names (their
names occur in its text) within two hops of its answers, and the relations in between:
"Morocco (country) -based_in (in)-> brand -made_by (in)-> product". The most common such
paths over a training batch also become candidate plans of their own (search the named
type by name, follow the path, optionally filter a field by the question's number or by
a value it names, rank by the question), scored beside the LLM's proposals.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from plugin.kb_meta import DocumentStructure
from plugin.schema import relation_names
from query_rewriter.strategies.agent.plan import slot_values

Hop = tuple[str, str, str]  # relation (as the structure names it), direction, type reached


@dataclass(frozen=True)
class PathSignature:
    named_type: str
    hops: tuple[Hop, ...]

    def describe(self, named: str) -> str:
        text = f"{named} ({self.named_type})"
        for relation, direction, reached in self.hops:
            text += f" -{relation} ({direction})-> {reached}"
        return text

    def steps(self) -> list[dict[str, Any]]:
        """The plan steps that walk this path from the named document."""
        steps: list[dict[str, Any]] = [
            {"id": "named", "op": "search", "text": "{query}", "type": self.named_type,
             "k": 1, "by": "name"}
        ]  # fmt: skip
        for number, (relation, direction, reached) in enumerate(self.hops, start=1):
            hop = {"relation": relation, "direction": direction, "type": reached}
            steps.append({"id": f"hop{number}", "op": "follow", "from": steps[-1]["id"], **hop})
        return steps


def signatures(
    paths: list[tuple[str, list[list[Any]], list[list[Any]]]], relations: list[str]
) -> list[tuple[str, PathSignature]]:
    """(the named node's name, its path toward the answer) for Neo4jGraph.named_paths rows."""
    named_relation = relation_names(relations)
    found = []
    for _answer, hops, nodes in paths:
        # Travel from the named node (last) to the answer (first).
        order = list(reversed(nodes))
        walked: list[Hop] = []
        for position, (rel_type, start_id) in enumerate(reversed(hops)):
            if rel_type not in named_relation:
                break
            origin, reached = order[position], order[position + 1]
            direction = "out" if start_id == origin[0] else "in"
            walked.append((named_relation[rel_type], direction, str(reached[1])))
        else:
            found.append((str(order[0][2]), PathSignature(str(order[0][1]), tuple(walked))))
    return found


def path_templates(
    common: Sequence[PathSignature], structure: DocumentStructure, questions: Sequence[str]
) -> list[dict[str, Any]]:
    """Candidate templates for the common paths: each path alone, then with a filter on
    each field of the answers' type (by the question's number where the questions have
    one, by a value they name otherwise), each ranked by the question."""
    with_numbers = all("number" in slot_values(q) for q in questions)
    templates = []
    for signature in common:
        walk = signature.steps()
        last = walk[-1]["id"]
        rank = {"id": "best", "op": "rank", "text": "{query}"}
        templates.append({"steps": [*walk, {**rank, "from": last}]})
        for field in structure.types.get(signature.hops[-1][2], []):
            condition: dict[str, Any] = (
                {"cmp": "{cmp}", "value": "{number}"} if with_numbers else {"cmp": "mentioned"}
            )
            keep = {"id": "kept", "op": "filter", "from": last, "field": field, **condition}
            templates.append({"steps": [*walk, keep, {**rank, "from": "kept"}]})
    return templates


def most_common(found: Sequence[PathSignature], top: int = 2) -> list[PathSignature]:
    return [signature for signature, _ in Counter(found).most_common(top)]
