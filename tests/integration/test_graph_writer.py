"""Both relation write paths (kgqr's procedure and the plain UNWIND statement) must leave
the same graph: the procedure is only a faster way to run the same MERGE."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from neo4j.exceptions import ClientError

from ingest import graph_writer
from ingest.records import Document, Relation
from plugin import installer
from plugin.neo4j import procedures

# In the edit-test loop (scripts/test-quick.sh): it needs only the always-on services.
pytestmark = pytest.mark.quick

RELATIONS = [
    Relation(source="a", type="cites", target="b", properties={"weight": 2, "tag": "x"}),
    Relation(source="a", type="cites", target="b", properties={"weight": 3}),  # same edge again
    Relation(source="b", type="cites", target="a"),  # the reverse is another edge
    Relation(source="a", type="authored by", target="c"),  # c has no document yet
    Relation(source="c", type="cites", target="c", properties={"note": "self", "ok": True}),
]


@pytest.fixture
def graph_kb(kb_name: str, neo4j_driver: Any) -> Iterator[str]:
    installer.install_neo4j(neo4j_driver)
    graph_writer.write_documents(neo4j_driver, kb_name, [
        Document(id="a", type="paper", title="A"), Document(id="b", type="paper", title="B"),
    ])  # fmt: skip
    yield kb_name
    neo4j_driver.execute_query("MATCH (n:Node {kb: $kb}) DETACH DELETE n", kb=kb_name)


def graph_of(driver: Any, kb: str) -> tuple[list[tuple], list[str]]:
    records, _, _ = driver.execute_query(
        "MATCH (s:Node {kb: $kb})-[r]->(t:Node) "
        "RETURN s.id AS s, type(r) AS type, t.id AS t, properties(r) AS props "
        "ORDER BY s, type, t",
        kb=kb,
    )
    nodes, _, _ = driver.execute_query(
        "MATCH (n:Node {kb: $kb}) RETURN n.id AS id ORDER BY id", kb=kb
    )
    edges = [(r["s"], r["type"], r["t"], r["props"]) for r in records]
    return edges, [n["id"] for n in nodes]


EXPECTED_EDGES = [
    ("a", "AUTHORED_BY", "c", {}),
    ("a", "CITES", "b", {"weight": 3, "tag": "x"}),
    ("b", "CITES", "a", {}),
    ("c", "CITES", "c", {"note": "self", "ok": True}),
]


@pytest.mark.parametrize("procedure", [True, False], ids=["procedure", "unwind"])
def test_relations_merge_once_and_rerun_changes_nothing(
    request: pytest.FixtureRequest, neo4j_driver: Any, graph_kb: str, procedure: bool
) -> None:
    if procedure:
        request.getfixturevalue("neo4j_procedures")
    for _ in range(2):
        graph_writer.write_relations(neo4j_driver, graph_kb, RELATIONS, procedure=procedure)
        assert graph_of(neo4j_driver, graph_kb) == (EXPECTED_EDGES, ["a", "b", "c"])


@pytest.mark.usefixtures("neo4j_procedures")
def test_procedure_counts_what_it_created_and_what_it_found(
    neo4j_driver: Any, graph_kb: str
) -> None:
    call = (
        f"CALL {procedures.RELATION_MERGE}($kb, $types, $sources, $targets) "
        "YIELD created, matched, nodesMerged RETURN created, matched, nodesMerged"
    )
    columns = {
        "types": ["CITES", "CITES", "CITES", "AUTHORED_BY", "CITES"],
        "sources": ["a", "a", "b", "a", "c"],
        "targets": ["b", "b", "a", "c", "c"],
    }
    first, _, _ = neo4j_driver.execute_query(call, kb=graph_kb, **columns)
    second, _, _ = neo4j_driver.execute_query(call, kb=graph_kb, **columns)
    assert first[0].values() == [4, 1, 1]  # a->b twice in one call is one relationship
    assert second[0].values() == [0, 5, 0]


@pytest.mark.usefixtures("neo4j_procedures")
def test_procedure_rejects_columns_of_different_lengths(neo4j_driver: Any, graph_kb: str) -> None:
    with pytest.raises(ClientError, match="differ in length"):
        neo4j_driver.execute_query(
            f"CALL {procedures.RELATION_MERGE}($kb, ['cites'], ['a', 'b'], ['b'])",
            kb=graph_kb,
        )
    assert graph_of(neo4j_driver, graph_kb) == ([], ["a", "b"])


def test_a_retyped_document_keeps_only_its_new_types_label(
    neo4j_driver: Any, graph_kb: str
) -> None:
    """A statement per label added the new one and left the old: a paper retyped as a book
    matched both `:Paper` and `:Book`."""
    graph_writer.write_documents(neo4j_driver, graph_kb, [
        Document(id="a", type="book", title="A"), Document(id="b", type="paper", title="B"),
    ])  # fmt: skip
    records, _, _ = neo4j_driver.execute_query(
        "MATCH (n:Node {kb: $kb}) RETURN n.id AS id, n.type AS type, labels(n) AS labels "
        "ORDER BY id", kb=graph_kb,
    )  # fmt: skip
    labels = {r["id"]: (r["type"], sorted(r["labels"])) for r in records}
    assert labels == {"a": ("book", ["Book", "Node"]), "b": ("paper", ["Node", "Paper"])}
