"""Neo4j reads for the KG strategies: h-hop neighbourhoods in one round trip, hubs capped.

Every expansion step takes at most ``cap`` relationships, so a node of degree 10,000
costs the same as one of degree ``cap``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np
from neo4j import AsyncDriver

from kgqr_core.field_evidence import Evidence, FieldEvidence, evidence_of
from kgqr_core.graph_version import Revision
from plugin.schema import relation_type

# A row is [seed, relation, outgoing, id, name, type, second hops, evidence]; a second
# hop is [id, type, relation, outgoing, name, evidence]. The name only when asked for,
# since reading thousands of names costs Neo4j a third of the query and only `kar_no_drf`
# uses them. The evidence is what a caller must be able to read to use the edge, beside its
# ends: the passage a triple (an entity-to-entity RELATION) was read from, or the fields of
# an attached index's document an edge was read from (kgqr_core/field_evidence.py); null
# for other relationships.
NEIGHBOURS = """
UNWIND $seeds AS seed
MATCH (s:Node {kb: $kb, id: seed})
CALL (s) {
  MATCH (s)-[r1]-(n1:Node)
  RETURN r1, n1 LIMIT $cap
}
CALL (s, n1) {
  OPTIONAL MATCH (n1)-[r2]-(n2:Node)
  WHERE $hops >= 2 AND n2 <> s
  WITH r2, n2 LIMIT $cap
  RETURN collect(CASE WHEN n2 IS NULL THEN null ELSE [
    n2.id, n2.type, coalesce(r2.relation, toLower(type(r2))), startNode(r2) = n1,
    CASE WHEN $names THEN n2.name END, coalesce(r2.field_evidence, r2.passage_id)
  ] END) AS second
}
RETURN collect([seed, coalesce(r1.relation, toLower(type(r1))), startNode(r1) = s,
                n1.id, n1.name, n1.type, second,
                coalesce(r1.field_evidence, r1.passage_id)]) AS rows
"""


def _render_hop(relation: str, outgoing: bool) -> str:
    return relation if outgoing else f"inverse of {relation}"


def has_document(node_type: str | None) -> bool:
    """Corpus-KG entity nodes (and untyped ones) have no document to score or show."""
    return node_type not in (None, "entity")


def not_read_from_text(node_type: str | None, evidence: Evidence | None) -> bool:
    """A step to a node with a document, along an edge no passage's text gave."""
    return has_document(node_type) and not isinstance(evidence, str)


def with_evidence(rows: list[list[Any]]) -> list[list[Any]]:
    """NEIGHBOURS rows with each stored FieldEvidence (a list) made one, in place: the
    readability check and `without` take evidence as hashable values."""
    for row in rows:
        if row[7] is not None:
            row[7] = evidence_of(row[7])
        for hop in row[6]:
            if hop[5] is not None:
                hop[5] = evidence_of(hop[5])
    return rows


class FollowedEdge(NamedTuple):
    """One relationship a plan's `follow` took: where from, where to, the target's type,
    and its evidence (a triple's passage, a field's; None for other edges)."""

    source: str
    target: str
    target_type: str | None
    passage: Evidence | None

    def evidence(self) -> set[Evidence]:
        """What a caller must be able to read to use this edge: its target's document and
        its evidence."""
        needed = {self.target} if has_document(self.target_type) else set()
        return needed | ({self.passage} if self.passage else set())


class Neighbour(NamedTuple):
    """A node reached from a seed, with the path that reached it, kept raw until rendered."""

    seed: str
    id: str
    name: str
    type: str | None
    # (relation, outgoing) for one hop; (relation, outgoing, via name, relation, outgoing) for two
    path: tuple[Any, ...]
    via: str | None = None  # the node between, on a two-hop path
    via_type: str | None = None
    # What its edges were read from (passages, an attached index's field values): the
    # facts its text states, which a rewrite showing it rests on.
    evidence: tuple[Evidence, ...] = ()

    @property
    def hops(self) -> int:
        return 1 if len(self.path) == 2 else 2

    @property
    def via_document(self) -> str | None:
        """The node between when it has a document: its name is that document's title."""
        return self.via if has_document(self.via_type) else None

    def relation_text(self, titles: Mapping[str, str] | None = None) -> str:
        """The path as text. `titles`: the titles of the documents between as the caller's
        own fetch returned them; a document between is named only from them (the graph's
        copy of a title ignores field-level security), by its id where they lack it."""
        first = _render_hop(self.path[0], self.path[1])
        if len(self.path) == 2:
            return first
        name = self.path[2]
        if titles is not None and self.via_document is not None:
            name = titles.get(self.via_document, self.via_document)
        return f"{first} -> [{name}] -> {_render_hop(self.path[3], self.path[4])}"


def passages_behind(paths: Iterable[Neighbour]) -> set[str]:
    """The documents `paths`' edges were read from: a rewrite that states them is served
    from the cache only while its caller may still read these (search/evidence.py; field
    evidence is kept as it is checked)."""
    return {item for path in paths for item in path.evidence if isinstance(item, str)}


def documents_between(paths: Iterable[Neighbour]) -> set[str]:
    """The documents in the middle of `paths`: the ones their texts name by title."""
    return {path.via_document for path in paths if path.via_document is not None}


@dataclass(frozen=True)
class Reach:
    """A neighbourhood as a walk sees it: nodes numbered with the seeds first (in the order
    given), the edges between them as two arrays of numbers, and which nodes are documents
    other than a seed."""

    nodes: Sequence[str]
    sources: np.ndarray
    targets: np.ndarray
    documents: np.ndarray


@dataclass(frozen=True)
class Neighbourhood:
    """The rows of one propagation query, read lazily.

    A hub-capped 2-hop query yields thousands of second hops and DRF keeps ten; turning
    every row into a `Neighbour` cost more than the Neo4j query itself (~12 ms for 4,800),
    so the ids to score come from one set comprehension and paths are built only for the
    ids asked for.
    """

    seeds: frozenset[str]
    rows: list[list[Any]]
    source: str = "neo4j"  # where the rows came from, for the explain

    def reach(self, seeds: Sequence[str]) -> Reach:
        position = {seed: number for number, seed in enumerate(seeds)}
        kinds: dict[str, str | None] = {}
        ends = []
        for seed, _relation, _outgoing, first, _name, first_type, second, _ in self.rows:
            kinds.setdefault(first, first_type)
            ends.append((seed, first))
            for hop in second:
                kinds.setdefault(hop[0], hop[1])
                ends.append((first, hop[0]))
        numbered = np.fromiter(
            (position.setdefault(node, len(position)) for edge in ends for node in edge),
            dtype=np.int64,
            count=2 * len(ends),
        )
        nodes = list(position)
        documents = np.fromiter(
            (node not in self.seeds and has_document(kinds.get(node)) for node in nodes),
            dtype=bool,
            count=len(nodes),
        )
        return Reach(nodes, numbered[0::2], numbered[1::2], documents)

    def around(self, ids: Collection[str] | None) -> Neighbourhood:
        """The part that paths to `ids` run through (all of it: rows are already read)."""
        return self

    def evidence_ids(self) -> set[Evidence]:
        """What a caller must be able to read for this neighbourhood to be theirs: every
        reached node with a document and every edge's evidence."""
        found: set[Evidence] = set()
        for row in self.rows:
            if has_document(row[5]):
                found.add(row[3])
            if row[7] is not None:
                found.add(row[7])
            for hop in row[6]:
                if has_document(hop[1]):
                    found.add(hop[0])
                if hop[5] is not None:
                    found.add(hop[5])
        return found - self.seeds

    def field_evidence(self) -> set[FieldEvidence]:
        """The evidence of edges read from fields, alone: cheap where there is none."""
        found = {row[7] for row in self.rows if isinstance(row[7], FieldEvidence)}
        for row in self.rows:
            found.update(hop[5] for hop in row[6] if isinstance(hop[5], FieldEvidence))
        return found

    def without(self, hidden: Collection[Evidence]) -> Neighbourhood:
        """The neighbourhood less every step into a `hidden` node or along an edge with
        `hidden` evidence (a first step's second hops go with it)."""
        blocked = set(hidden)
        if not blocked:
            return self
        rows = [
            [*row[:6], [hop for hop in row[6] if not blocked & {hop[0], hop[5]}], row[7]]
            for row in self.rows
            if not blocked & {row[3], row[7]}
        ]
        return Neighbourhood(self.seeds, rows, self.source)

    def without_text_facts(self) -> Neighbourhood:
        """The neighbourhood less every step into an entity (named by what a passage says)
        and along an edge read from a passage's text: its documents' own relations."""
        rows = [
            [*row[:6], [hop for hop in row[6] if not_read_from_text(hop[1], hop[5])], row[7]]
            for row in self.rows
            if not_read_from_text(row[5], row[7])
        ]
        return Neighbourhood(self.seeds, rows, self.source)

    def document_ids(self) -> set[str]:
        """Every reached node that has a document, seeds excluded: what DRF scores."""
        return self._documents(through_documents=True)

    def bridged_documents(self, from_seeds: Collection[str] | None = None) -> set[str]:
        """Documents one hop from a seed, or two through a node without a document (an
        entity the seed mentions): what a seed document's text leads to. Two hops through
        another document are a second document's neighbours, not this one's. Only from
        `from_seeds` when given (then only they are left out), as a neighbourhood read
        from them alone would give."""
        return self._documents(through_documents=False, from_seeds=from_seeds)

    def _documents(
        self, through_documents: bool, from_seeds: Collection[str] | None = None
    ) -> set[str]:
        rows = self.rows if from_seeds is None else [r for r in self.rows if r[0] in from_seeds]
        first = {row[3] for row in rows if has_document(row[5])}
        second = {
            hop[0]
            for row in rows
            if through_documents or not has_document(row[5])
            for hop in row[6]
            if has_document(hop[1])
        }
        return (first | second) - (self.seeds if from_seeds is None else set(from_seeds))

    def names(self) -> dict[str, str]:
        """Name (id when unnamed) of every node with a document; needs `with_names`."""
        names = {row[3]: row[4] or row[3] for row in self.rows if has_document(row[5])}
        for row in self.rows:
            for hop in row[6]:
                if has_document(hop[1]):
                    names.setdefault(hop[0], hop[4] or hop[0])
        return {node_id: name for node_id, name in names.items() if node_id not in self.seeds}

    def vias(self, ids: Collection[str]) -> set[str]:
        """The middle nodes with a document on any two-hop path to `ids`: the evidence a
        path shows besides its ends, which a caller must be able to read too."""
        wanted = set(ids)
        return {
            row[3]
            for row in self.rows
            if has_document(row[5]) and any(hop[0] in wanted for hop in row[6])
        } - self.seeds

    def paths(
        self,
        ids: Collection[str] | None = None,
        hidden: Collection[str] = (),
        between_seeds: bool = False,
    ) -> list[Neighbour]:
        """Distinct (seed, neighbour) pairs for `ids` (all reached nodes when None), each
        with its shortest path that passes through no `hidden` node. A seed is a neighbour
        of another seed only `between_seeds` (the graph walk, where every hit seeds)."""
        wanted = None if ids is None else set(ids)
        blocked = set(hidden)
        found: dict[tuple[str, str], Neighbour] = {}

        def skip(seed: str, node_id: str) -> bool:
            return (
                (wanted is not None and node_id not in wanted)
                or (node_id in self.seeds and not between_seeds)
                or node_id == seed
                or (seed, node_id) in found
            )

        for seed, relation, outgoing, node_id, name, node_type, _, evidence in self.rows:
            if node_id not in blocked and not skip(seed, node_id):
                found[seed, node_id] = Neighbour(
                    seed,
                    node_id,
                    name or node_id,
                    node_type,
                    (relation, outgoing),
                    evidence=_read_from(evidence),
                )
        # Second hops only after every first hop, so a node one hop away keeps its short path.
        for seed, relation, outgoing, via_id, via_name, via_type, second, first in self.rows:
            if via_id in blocked:
                continue
            for next_id, next_type, next_relation, next_outgoing, next_name, then in second:
                if next_id not in blocked and not skip(seed, next_id):
                    found[seed, next_id] = Neighbour(
                        seed,
                        next_id,
                        next_name or next_id,
                        next_type,
                        (relation, outgoing, via_name or via_id, next_relation, next_outgoing),
                        via_id,
                        via_type,
                        _read_from(first, then),
                    )
        return list(found.values())


def _read_from(*evidence: Evidence | None) -> tuple[Evidence, ...]:
    return tuple(item for item in evidence if item is not None)


class Neighbours(Protocol):
    """What a strategy reads of a neighbourhood, wherever it came from: Neo4j's rows
    (Neighbourhood) or an in-memory copy's arrays (graph_snapshot.SnapshotNeighbourhood)."""

    @property
    def seeds(self) -> frozenset[str]: ...

    @property
    def source(self) -> str: ...

    def reach(self, seeds: Sequence[str]) -> Reach: ...

    def around(self, ids: Collection[str] | None) -> Neighbourhood: ...

    def evidence_ids(self) -> set[Evidence]: ...

    def field_evidence(self) -> set[FieldEvidence]: ...

    def without_text_facts(self) -> Neighbours: ...

    def without(self, hidden: Collection[Evidence]) -> Neighbours: ...

    def document_ids(self) -> set[str]: ...

    def bridged_documents(self, from_seeds: Collection[str] | None = None) -> set[str]: ...

    def names(self) -> dict[str, str]: ...

    def vias(self, ids: Collection[str]) -> set[str]: ...

    def paths(
        self,
        ids: Collection[str] | None = None,
        hidden: Collection[str] = (),
        between_seeds: bool = False,
    ) -> list[Neighbour]: ...


ENTITY_EDGES = """
UNWIND $frontier AS source
MATCH (e:Node {kb: $kb, id: source})
CALL (e) {
  MATCH (e)-[r:RELATION]-(n:Node)
  RETURN r.triple_id AS triple_id, n.id AS target,
         coalesce(r.field_evidence, r.passage_id) AS passage LIMIT $cap
}
RETURN collect([source, triple_id, target, passage]) AS edges
"""


FOLLOW = """
UNWIND $sources AS source
MATCH (s:Node {kb: $kb, id: source})
CALL (s) {
  MATCH (s)PATTERN(t:Node)
  WHERE $type IS NULL OR t.type = $type
  RETURN t.id AS target, t.type AS target_type,
         coalesce(r.field_evidence, r.passage_id) AS passage LIMIT $cap
}
RETURN collect([source, target, target_type, passage]) AS pairs
"""
# Paths of up to two hops from a document to the nodes a question names (their names occur
# in its lower-cased text): how the question's words reach its true answers.
NAMED_PATHS = """
UNWIND $answers AS answer
MATCH (a:Node {kb: $kb, id: answer})
CALL (a) {
  MATCH p = (a)-[*1..2]-(n:Node)
  WHERE n <> a AND n.name IS NOT NULL AND size(n.name) >= 3 AND $text CONTAINS toLower(n.name)
  RETURN [r IN relationships(p) | [type(r), startNode(r).id]] AS hops,
         [x IN nodes(p) | [x.id, x.type, x.name]] AS nodes
  LIMIT $cap
}
RETURN collect([answer, hops, nodes]) AS paths
"""
FOLLOW_PATTERNS = {"out": "-[r:`{0}`]->", "in": "<-[r:`{0}`]-", "both": "-[r:`{0}`]-"}


class Neo4jGraph:
    """The knowledge graph as strategies read it (strategies.services.Graph), over Neo4j.
    Reads are routed to readers (`routing_="r"`), so a cluster spreads them."""

    def __init__(self, driver: AsyncDriver) -> None:
        self._driver = driver

    async def revision(self, kb: str) -> Revision | None:
        """The KB's graph revision (kgqr_core/graph_version.py); unknown without Redis."""
        return None

    async def neighbours(
        self,
        kb: str,
        node_ids: list[str],
        hops: int = 2,
        cap: int = 50,
        with_names: bool = False,
    ) -> Neighbours:
        """Everything within `hops` of the seeds, one round trip; second-hop names only
        `with_names`."""
        records, _, _ = await self._driver.execute_query(
            NEIGHBOURS, kb=kb, seeds=node_ids, hops=hops, cap=cap, names=with_names, routing_="r"
        )
        return Neighbourhood(frozenset(node_ids), with_evidence(records[0]["rows"]))

    async def entity_edges(
        self, kb: str, frontier: list[str], cap: int = 50
    ) -> list[tuple[str, str, str, Evidence | None]]:
        """(source entity, triple id, other entity, evidence) for RELATION edges of the
        frontier, capped per node; one round trip for the whole frontier."""
        records, _, _ = await self._driver.execute_query(
            ENTITY_EDGES, kb=kb, frontier=frontier, cap=cap, routing_="r"
        )
        return [(source, triple_id, target, evidence_of(passage))
                for source, triple_id, target, passage in records[0]["edges"]]  # fmt: skip

    async def named_paths(
        self, kb: str, answers: list[str], text: str, cap: int = 3
    ) -> list[tuple[str, list[list[Any]], list[list[Any]]]]:
        """(answer, hops [relationship type, start node id], nodes [id, type, name]) for
        paths from each answer to a node whose name `text` contains, answer first."""
        records, _, _ = await self._driver.execute_query(
            NAMED_PATHS, kb=kb, answers=answers, text=text.lower(), cap=cap, routing_="r"
        )
        return [(answer, hops, nodes) for answer, hops, nodes in records[0]["paths"]]

    async def follow(
        self,
        kb: str,
        sources: list[str],
        relation: str,
        direction: str,
        node_type: str | None = None,
        cap: int = 500,
    ) -> list[FollowedEdge]:
        """The steps one `relation` away, at most `cap` per source. The relationship type
        is interpolated (Cypher cannot take it as a parameter) only as
        `plugin.schema.relation_type` spells it: letters, digits and underscores."""
        pattern = FOLLOW_PATTERNS[direction].format(relation_type(relation))
        records, _, _ = await self._driver.execute_query(
            FOLLOW.replace("PATTERN", pattern),
            kb=kb, sources=sources, type=node_type, cap=cap, routing_="r",
        )  # fmt: skip
        return [
            FollowedEdge(source, target, target_type, evidence_of(passage))
            for source, target, target_type, passage in records[0]["pairs"]
        ]
