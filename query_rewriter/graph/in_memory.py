"""An in-memory copy of one knowledge base's graph, so the `graph` walk runs at search speed.

At a million relations, Neo4j's two-hop expansion for the walk took ~54 ms a search and
turning its rows into a walk another ~25 ms: most of what `graph` added to a search. Here
the graph is a compressed sparse row adjacency holding both directions of every
relationship, so a hub-capped two-hop expansion is a few numpy slices, the walk runs on
node numbers, and ids, names and paths are made only for the nodes an answer shows.
Strings are flat arrays too (graph/columns.py), so a copy is nothing but arrays, which
graph/shared_copies.py shares between the processes of a machine. Neo4j stays the source of
truth; graph/copies.py decides when a copy is current.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kgqr_core.field_evidence import Evidence, FieldEvidence, evidence_of
from query_rewriter.graph.columns import KeyIndex, StringColumn
from query_rewriter.graph.store import Neighbour, Neighbourhood, Reach
from query_rewriter.graph.store import has_document as has_document_type

COUNT_RELATIONS = "MATCH (:Node {kb: $kb})-[r]->() RETURN count(r) AS relations"
NODES = "MATCH (n:Node {kb: $kb}) RETURN n.id AS id, n.type AS type, n.name AS name"
RELATIONSHIPS = """
MATCH (a:Node {kb: $kb})-[r]->(b:Node {kb: $kb})
RETURN a.id AS source, b.id AS target, coalesce(r.relation, toLower(type(r))) AS relation,
       coalesce(r.field_evidence, r.passage_id) AS evidence
"""


def _slices(
    offsets: np.ndarray, nodes: np.ndarray, limit: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The first `limit` edges of each node: (which of `nodes`, edge position), and how many
    each node gave."""
    starts = offsets[nodes]
    counts = np.minimum(offsets[nodes + 1] - starts, limit)
    owner = np.repeat(np.arange(len(nodes)), counts)
    before = np.cumsum(counts) - counts
    positions = np.repeat(starts - before, counts) + np.arange(int(counts.sum()))
    return owner, positions, counts


@dataclass(frozen=True)
class GraphSnapshot:
    """Node i's edges are positions offsets[i]..offsets[i+1] of `neighbour` (the node at
    the other end), `relation` (a number into `relations`), `outgoing` (node i is the
    relationship's start) and `source` (its evidence: the node of the passage a triple edge
    was read from, or for an edge read from an attached document's fields -2 less its
    number in `field_evidence`; -1 for other edges), in the order they were read.
    `position` finds a node's number by id, `gate` a field evidence's by its stored form."""

    version: int
    ids: StringColumn
    position: KeyIndex
    types: StringColumn
    names: StringColumn
    has_document: np.ndarray
    offsets: np.ndarray
    neighbour: np.ndarray
    relation: np.ndarray
    outgoing: np.ndarray
    source: np.ndarray
    relations: list[str]
    field_evidence: StringColumn  # each as the JSON of its stored form
    gate: KeyIndex

    @classmethod
    def build(
        cls,
        version: int,
        nodes: Iterable[tuple[str, str | None, str | None]],
        relationships: Iterable[tuple[Any, ...]],
    ) -> GraphSnapshot:
        """From (id, type, name) nodes and (start id, end id, relation[, evidence])
        relationships, the evidence a passage id or a stored FieldEvidence; a relationship
        whose end or passage is not among the nodes (written between the two reads) is left
        out, since no caller's right to it could be checked."""
        ids: list[str] = []
        types: list[str | None] = []
        names: list[str | None] = []
        for node_id, node_type, name in nodes:
            ids.append(node_id)
            types.append(node_type)
            names.append(name)
        position = {node_id: number for number, node_id in enumerate(ids)}
        numbered: dict[str, int] = {}
        gates: dict[FieldEvidence, int] = {}
        starts, ends, kinds, sources = [], [], [], []
        for start, end, relation, *stored in relationships:
            evidence = evidence_of(stored[0]) if stored else None
            if isinstance(evidence, FieldEvidence):
                read_from = -2 - gates.setdefault(evidence, len(gates))
            elif evidence:
                if evidence not in position:
                    continue
                read_from = position[evidence]
            else:
                read_from = -1
            if start in position and end in position:
                starts.append(position[start])
                ends.append(position[end])
                kinds.append(numbered.setdefault(relation, len(numbered)))
                sources.append(read_from)
        start_numbers, end_numbers = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
        owner = np.concatenate([start_numbers, end_numbers])
        other = np.concatenate([end_numbers, start_numbers])
        has_document = np.fromiter(map(has_document_type, types), bool, count=len(types))
        # A hub's first edges are the ones a capped expansion follows: those to documents
        # first (what the walk can boost), as Neo4j's type-grouped storage tends to give.
        order = np.lexsort((~has_document[other], owner))
        offsets = np.zeros(len(ids) + 1, np.int64)
        offsets[1:] = np.cumsum(np.bincount(owner, minlength=len(ids)))
        outgoing = np.concatenate([np.ones(len(starts), bool), np.zeros(len(starts), bool)])
        kind = np.asarray(kinds, np.int32)
        source = np.asarray(sources, np.int32)
        id_column = StringColumn.of(ids)
        stored_evidence = [json.dumps(evidence.as_stored()) for evidence in gates]
        evidence_column = StringColumn.of(stored_evidence)
        return cls(
            version=version,
            ids=id_column,
            position=KeyIndex.of(id_column, ids),
            types=StringColumn.of(types),
            names=StringColumn.of(names),
            has_document=has_document,
            offsets=offsets,
            neighbour=other[order].astype(np.int32),
            relation=np.concatenate([kind, kind])[order],
            outgoing=outgoing[order],
            source=np.concatenate([source, source])[order],
            relations=list(numbered),
            field_evidence=evidence_column,
            gate=KeyIndex.of(evidence_column, stored_evidence),
        )

    def arrays(self) -> dict[str, np.ndarray]:
        """Everything but `version` and `relations`, by name: what a shared copy's files
        hold (from_arrays reads them back)."""
        return {
            **self.ids.arrays("ids"), **self.position.arrays("position"),
            **self.types.arrays("types"), **self.names.arrays("names"),
            **self.field_evidence.arrays("field_evidence"), **self.gate.arrays("gate"),
            "has_document": self.has_document, "offsets": self.offsets,
            "neighbour": self.neighbour, "relation": self.relation,
            "outgoing": self.outgoing, "source": self.source,
        }  # fmt: skip

    @classmethod
    def from_arrays(
        cls, version: int, relations: list[str], arrays: dict[str, np.ndarray]
    ) -> GraphSnapshot:
        ids = StringColumn.from_arrays(arrays, "ids")
        field_evidence = StringColumn.from_arrays(arrays, "field_evidence")
        return cls(
            version=version,
            ids=ids,
            position=KeyIndex.from_arrays(ids, arrays, "position"),
            types=StringColumn.from_arrays(arrays, "types"),
            names=StringColumn.from_arrays(arrays, "names"),
            has_document=arrays["has_document"],
            offsets=arrays["offsets"],
            neighbour=arrays["neighbour"],
            relation=arrays["relation"],
            outgoing=arrays["outgoing"],
            source=arrays["source"],
            relations=relations,
            field_evidence=field_evidence,
            gate=KeyIndex.from_arrays(field_evidence, arrays, "gate"),
        )

    @property
    def relationship_count(self) -> int:
        return len(self.neighbour) // 2

    def numbers(self, node_ids: Iterable[str]) -> np.ndarray:
        """The node numbers of those of `node_ids` the graph holds, in their order."""
        found = (self.position.find(node_id) for node_id in node_ids)
        return np.asarray([number for number in found if number is not None], np.int64)

    def evidence(self, source: int) -> FieldEvidence:
        """The field evidence a `source` value of -2 or less stands for."""
        return FieldEvidence.stored(json.loads(self.field_evidence[-2 - source]))

    def blocked(self, hidden: Iterable[Evidence]) -> np.ndarray:
        """The `neighbour` and `source` values that stand for the hidden evidence: a
        document's node number, a field evidence's -2 less its number."""
        found = []
        for evidence in hidden:
            if isinstance(evidence, str):
                found.append(self.position.find(evidence))
            else:
                number = self.gate.find(json.dumps(evidence.as_stored()))
                found.append(None if number is None else -2 - number)
        return np.asarray([value for value in found if value is not None], np.int64)

    def neighbours(self, node_ids: Sequence[str], hops: int, cap: int) -> SnapshotNeighbourhood:
        """What Neo4jGraph.neighbours answers: each seed's first `cap` relationships, and
        for each node they reach its first `cap` relationships that do not lead back to
        that seed. (Which `cap` a hub gives differs: Neo4j's are in its storage order.)"""
        seeds = self.numbers(node_ids)
        owner, first_edge, _ = _slices(self.offsets, seeds, cap)
        first_seed = seeds[owner]
        second_row = second_edge = np.zeros(0, np.int64)
        if hops >= 2 and len(first_edge):
            first_node = self.neighbour[first_edge].astype(np.int64)
            # Twice the cap leaves room for the edges back to the seed, which do not count.
            rows, edges, counts = _slices(self.offsets, first_node, 2 * cap)
            onward = self.neighbour[edges] != first_seed[rows]
            taken = np.cumsum(onward)
            before = np.concatenate([[0], taken])[np.cumsum(counts) - counts]
            keep = onward & (taken - np.repeat(before, counts) <= cap)
            second_row, second_edge = rows[keep], edges[keep]
        return SnapshotNeighbourhood(
            self, frozenset(node_ids), first_seed, first_edge, second_row, second_edge
        )


@dataclass(frozen=True)
class SnapshotNeighbourhood:
    """A neighbourhood as node and edge numbers: Neighbourhood's answers, computed from
    arrays, and Neo4j-shaped rows only for the part an answer shows (`around`)."""

    graph: GraphSnapshot
    seeds: frozenset[str]
    first_seed: np.ndarray  # the seed each first hop starts from (node number)
    first_edge: np.ndarray  # its edge position
    second_row: np.ndarray  # the first hop each second hop extends
    second_edge: np.ndarray

    @property
    def source(self) -> str:
        return f"snapshot v{self.graph.version}"

    def _ends(self) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) node numbers of every step: seed to first hop, first to second."""
        first_node = self.graph.neighbour[self.first_edge]
        starts = np.concatenate([self.first_seed, first_node[self.second_row]])
        return starts, np.concatenate([first_node, self.graph.neighbour[self.second_edge]])

    def evidence_ids(self) -> set[Evidence]:
        graph = self.graph
        edges = np.concatenate([self.first_edge, self.second_edge])
        nodes = np.unique(graph.neighbour[edges])
        sources = np.unique(graph.source[edges])
        numbers = np.union1d(nodes[graph.has_document[nodes]], sources[sources >= 0])
        found: set[Evidence] = set(self.field_evidence())
        return found | ({graph.ids[n] for n in numbers.tolist()} - self.seeds)

    def field_evidence(self) -> set[FieldEvidence]:
        graph = self.graph
        sources = np.unique(graph.source[np.concatenate([self.first_edge, self.second_edge])])
        return {graph.evidence(n) for n in sources[sources <= -2].tolist()}

    def without(self, hidden: Collection[Evidence]) -> SnapshotNeighbourhood:
        graph = self.graph
        if not hidden:
            return self
        blocked = graph.blocked(hidden)
        if not len(blocked):
            return self

        def open_steps(edges: np.ndarray) -> np.ndarray:
            return ~(
                np.isin(graph.neighbour[edges], blocked) | np.isin(graph.source[edges], blocked)
            )

        return self._keeping(open_steps)

    def without_text_facts(self) -> SnapshotNeighbourhood:
        graph = self.graph

        def open_steps(edges: np.ndarray) -> np.ndarray:
            # A passage's node number as its source: the edge was read from its text.
            return np.asarray(
                graph.has_document[graph.neighbour[edges]] & (graph.source[edges] < 0)
            )

        return self._keeping(open_steps)

    def _keeping(self, open_steps: Callable[[np.ndarray], np.ndarray]) -> SnapshotNeighbourhood:
        """The neighbourhood with the steps `open_steps` keeps, a first step's second hops
        going with it."""
        first_kept = open_steps(self.first_edge)
        second_kept = first_kept[self.second_row] & open_steps(self.second_edge)
        renumbered = np.cumsum(first_kept) - 1  # a kept first hop's number among the kept
        return SnapshotNeighbourhood(
            self.graph,
            self.seeds,
            self.first_seed[first_kept],
            self.first_edge[first_kept],
            renumbered[self.second_row[second_kept]],
            self.second_edge[second_kept],
        )

    def reach(self, seeds: Sequence[str]) -> Reach:
        starts, ends = self._ends()
        position = self.graph.position
        found = ((n, position.find(seed)) for n, seed in enumerate(seeds))
        seeded = [(n, number) for n, number in found if number is not None]
        seed_numbers = np.asarray([number for _, number in seeded], np.int64)
        others = np.setdiff1d(np.concatenate([starts, ends]), seed_numbers)
        # Local numbers: the seeds' (in the order given), then the others'.
        keys = np.concatenate([seed_numbers, others])
        local = np.concatenate(
            [np.asarray([n for n, _ in seeded], np.int64), len(seeds) + np.arange(len(others))]
        )
        sorter = np.argsort(keys)

        def numbered(nodes: np.ndarray) -> np.ndarray:
            return np.asarray(local[sorter[np.searchsorted(keys, nodes, sorter=sorter)]])

        ids = self.graph.ids
        documents = np.concatenate([np.zeros(len(seeds), bool), self.graph.has_document[others]])
        names = [*seeds, *(ids[n] for n in others.tolist())]
        return Reach(names, numbered(starts), numbered(ends), documents)

    def document_ids(self) -> set[str]:
        return self._documents(self._ends()[1])

    def bridged_documents(self, from_seeds: Collection[str] | None = None) -> set[str]:
        graph = self.graph
        first = np.ones(len(self.first_edge), bool)
        if from_seeds is not None:
            first = np.isin(self.first_seed, graph.numbers(from_seeds))
        first_node = graph.neighbour[self.first_edge]
        through_entity = ~graph.has_document[first_node[self.second_row]] & first[self.second_row]
        second_node = graph.neighbour[self.second_edge][through_entity]
        reached = np.concatenate([first_node[first], second_node])
        return self._documents(reached, self.seeds if from_seeds is None else set(from_seeds))

    def _documents(self, reached: np.ndarray, left_out: Collection[str] | None = None) -> set[str]:
        """The ids of the reached nodes that have a document, less `left_out` (the seeds)."""
        reached = np.unique(reached)
        reached = reached[self.graph.has_document[reached]]
        return {self.graph.ids[n] for n in reached.tolist()} - set(
            self.seeds if left_out is None else left_out
        )

    def around(self, ids: Collection[str] | None) -> Neighbourhood:
        """Neo4j-shaped rows of the paths that end at `ids` (every path when None)."""
        graph = self.graph
        first_node = graph.neighbour[self.first_edge]
        second_node = graph.neighbour[self.second_edge]
        if ids is None:
            first_wanted = np.ones(len(first_node), bool)
            second_wanted = np.ones(len(second_node), bool)
        else:
            wanted = graph.numbers(ids)
            first_wanted = np.isin(first_node, wanted)
            second_wanted = np.isin(second_node, wanted)
        onward: dict[int, list[list[Any]]] = {}
        for row, edge in zip(
            self.second_row[second_wanted].tolist(),
            self.second_edge[second_wanted].tolist(),
            strict=True,
        ):
            onward.setdefault(row, []).append(self._hop(edge))
        shown = first_wanted.copy()
        shown[list(onward)] = True
        rows = []
        for row in np.flatnonzero(shown):
            seed, edge, node = int(self.first_seed[row]), int(self.first_edge[row]), first_node[row]
            rows.append([
                graph.ids[seed], graph.relations[graph.relation[edge]], bool(graph.outgoing[edge]),
                graph.ids[node], graph.names.get(node), graph.types.get(node),
                onward.get(int(row), []),
                self._source_of(edge),
            ])  # fmt: skip
        return Neighbourhood(self.seeds, rows, self.source)

    def _hop(self, edge: int) -> list[Any]:
        graph, node = self.graph, int(self.graph.neighbour[edge])
        relation = graph.relations[graph.relation[edge]]
        return [graph.ids[node], graph.types.get(node), relation, bool(graph.outgoing[edge]),
                graph.names.get(node), self._source_of(edge)]  # fmt: skip

    def _source_of(self, edge: int) -> Evidence | None:
        source = int(self.graph.source[edge])
        if source <= -2:
            return self.graph.evidence(source)
        return self.graph.ids[source] if source >= 0 else None

    def names(self) -> dict[str, str]:
        return self.around(None).names()

    def vias(self, ids: Collection[str]) -> set[str]:
        return self.around(ids).vias(ids)

    def paths(
        self,
        ids: Collection[str] | None = None,
        hidden: Collection[str] = (),
        between_seeds: bool = False,
    ) -> list[Neighbour]:
        return self.around(ids).paths(ids, hidden, between_seeds)
