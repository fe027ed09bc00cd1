"""The graph's copy in OpenSearch answers expansions as the in-memory copy (and so Neo4j)
does, from one document a node: hub caps per step, no second step back to the seed,
evidence kept, names of the first hops only. The documents here are made as
ingest/graph_projection.py writes them, from the in-memory copy's test graph."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ingest.graph_projection import _bulk, node_document
from ingest.transient_errors import is_transient
from query_rewriter.graph.in_memory import GraphSnapshot
from query_rewriter.graph.projection import CopyCannotAnswer, neighbourhood_rows
from query_rewriter.graph.store import Neighbourhood, with_evidence

NODES = [
    ("m1", "movie", "Heat"),
    ("m2", "movie", "Collateral"),
    ("m3", "movie", "Ali"),
    ("p1", "person", "Michael Mann"),
    ("p2", "person", "Al Pacino"),
    ("e1", "entity", "Los Angeles"),
]
RELATIONSHIPS = [
    ("m1", "p1", "directed_by", None),
    ("m2", "p1", "directed_by", None),
    ("m3", "p1", "directed_by", None),
    ("m1", "p2", "starring", None),
    ("m1", "e1", "mentions", "m2"),  # read from m2's passage: m2 is its evidence
    ("m2", "e1", "mentions", None),
    ("m1", "p1", "produced_by", None),  # a second edge between the same two nodes
]


def documents(edges: int) -> dict[str, dict[str, Any]]:
    """Each node's document, its first `edges` edges in the order they were written (the
    order the in-memory copy keeps, as Neo4j's expansion keeps its own)."""
    kinds = {node_id: (kind, name) for node_id, kind, name in NODES}
    found: dict[str, list[list[Any]]] = {node_id: [] for node_id, _, _ in NODES}
    for start, end, relation, evidence in RELATIONSHIPS:
        found[start].append([end, kinds[end][0], relation, True, evidence])
        found[end].append([start, kinds[start][0], relation, False, evidence])
    return {
        node_id: node_document(node_id, kinds[node_id][0], kinds[node_id][1], node_edges[:edges])
        for node_id, node_edges in found.items()
    }


def projected(seeds: list[str], hops: int, cap: int, edges: int = 64) -> Neighbourhood:
    copy = documents(edges)
    rows = neighbourhood_rows(seeds, copy, copy, hops, cap, edges)
    return Neighbourhood(frozenset(seeds), with_evidence(rows), "opensearch")


def paths(hood: Any) -> set[tuple[str, str, str]]:
    return {(path.seed, path.id, path.relation_text()) for path in hood.paths()}


@pytest.mark.parametrize("seeds", [["m1"], ["p1"], ["e1"], ["m2", "m3"], ["m1", "p2"]])
@pytest.mark.parametrize("hops", [1, 2])
def test_every_expansion_below_the_cap_is_the_in_memory_copys(seeds: list[str], hops: int) -> None:
    """(Which edges a capped hub gives is each store's own order: below.)"""
    memory = GraphSnapshot.build(1, NODES, RELATIONSHIPS).neighbours(seeds, hops, cap=50)
    copy = projected(seeds, hops, cap=50)
    assert paths(copy) == paths(memory)
    assert copy.document_ids() == memory.document_ids()
    assert copy.bridged_documents() == memory.bridged_documents()
    assert copy.evidence_ids() == memory.evidence_ids()


def test_a_hub_gives_its_first_cap_edges_in_the_order_the_copy_keeps() -> None:
    assert paths(projected(["m1"], hops=1, cap=2)) == {
        ("m1", "p1", "directed_by"),
        ("m1", "p2", "starring"),
    }


def test_a_second_hop_skips_the_seed_before_the_cap() -> None:
    """p1's first edges lead back to m1 twice; with spare edges beyond the cap the copy
    still gives two others, as Neo4j's `n2 <> s` before LIMIT does."""
    hood = projected(["m1"], hops=2, cap=2, edges=4)
    through_p1 = {path.id for path in hood.paths() if path.via == "p1"}
    assert through_p1 == {"m2", "m3"}


def test_edges_back_to_the_seed_that_crowd_out_the_cap_leave_the_expansion_to_neo4j() -> None:
    """m1 keeps 4 edges, two of them back to p1: two others are left for a cap of 3, and
    the copy cannot tell whether m1 has a third that Neo4j, reading all of m1's, would give."""
    with pytest.raises(CopyCannotAnswer):
        projected(["p1"], hops=2, cap=3, edges=4)
    assert projected(["p1"], hops=2, cap=3, edges=5).rows  # all of m1's edges: it can


def test_a_first_hops_type_is_its_own_documents_not_the_edges_copy() -> None:
    """A relation written before its document left the edge's copy of m2's type empty; m2's
    own document, rewritten with the document, has it."""
    copy = documents(64)
    copy["p1"]["edges"]["t"] = [None if n == "m2" else t
                                for n, t in zip(copy["p1"]["edges"]["n"], copy["p1"]["edges"]["t"],
                                                strict=True)]  # fmt: skip
    hood = Neighbourhood(
        frozenset(["p1"]), with_evidence(neighbourhood_rows(["p1"], copy, copy, 2, 50, 64))
    )
    assert "m2" in hood.document_ids()


def test_first_hops_are_named_and_second_hops_not() -> None:
    hood = projected(["m3"], hops=2, cap=50)
    assert hood.names()["p1"] == "Michael Mann"
    assert hood.names()["m2"] == "m2"  # second-hop names: only Neo4j reads them (kar_no_drf)
    assert hood.source == "opensearch"


def test_a_node_the_copy_lacks_reaches_nothing() -> None:
    assert projected(["gone"], hops=2, cap=50).rows == []


@pytest.mark.parametrize(("status", "transient"), [(429, True), (503, True), (400, False)])
def test_a_graph_copy_write_pushed_back_retries_its_chunk(status: int, transient: bool) -> None:
    """Any failed write raised a plain error: a 429 failed its chunk for good, after both
    stores had the chunk's records, and searches kept reading a stale copy."""

    class Engine:
        def bulk(self, body: bytes, timeout: int) -> dict[str, Any]:
            return {"items": [{"index": {"status": 201}}, {"index": {"status": status}}]}

    with pytest.raises(RuntimeError) as raised:
        _bulk(Engine(), "kb", [({"index": {}}, {}), ({"index": {}}, {})])
    assert is_transient(raised.value) is transient


def test_the_graph_copys_writes_go_in_requests_the_engine_takes() -> None:
    """Up to 2,000 node documents went as one request: a cluster whose
    `http.max_content_length` is 10 MB refused it whole, for the chunk, on every re-run."""
    from opensearchpy.exceptions import TransportError

    from ingest.bulk_requests import Operation

    sizes: list[int] = []

    class Engine:
        def bulk(self, body: bytes, timeout: int) -> dict[str, Any]:
            if len(body) > 3_000:
                raise TransportError(413, "too large")
            sizes.append(len(body))
            lines = [json.loads(line) for line in body.splitlines()]
            verbs = [next(iter(line)) for line in lines if set(line) <= {"index", "delete"}]
            return {"items": [{verb: {"status": 404 if verb == "delete" else 201}}
                              for verb in verbs]}  # fmt: skip

    operations: list[Operation] = [
        ({"index": {"_id": f"n{i}"}}, {"edges": "x" * 500}) for i in range(20)
    ]
    operations.insert(5, ({"delete": {"_id": "gone"}}, None))
    _bulk(Engine(), "kb", operations)  # a delete's 404 is "gone already", not a failure
    assert len(sizes) > 1 and max(sizes) <= 3_000
