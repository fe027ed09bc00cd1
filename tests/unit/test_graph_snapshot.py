"""The in-memory graph copy answers expansions as Neo4j's query does: hub caps per step,
no step back to the seed, documents numbered for the walk, Neo4j-shaped paths."""

from __future__ import annotations

from kgqr_core.field_evidence import FieldEvidence
from query_rewriter.graph.in_memory import GraphSnapshot
from query_rewriter.graph.store import passages_behind

NODES = [
    ("m1", "movie", "Heat"),
    ("m2", "movie", "Collateral"),
    ("m3", "movie", "Ali"),
    ("p1", "person", "Michael Mann"),
    ("e1", "entity", "Los Angeles"),
]
RELATIONSHIPS = [
    ("m1", "p1", "directed_by"),
    ("m2", "p1", "directed_by"),
    ("m3", "p1", "directed_by"),
    ("m1", "e1", "mentions"),
    ("m2", "e1", "mentions"),
    ("m1", "gone", "starring"),  # its end was deleted between the two reads
]


def snapshot() -> GraphSnapshot:
    return GraphSnapshot.build(7, NODES, RELATIONSHIPS)


def test_both_directions_of_every_relationship_are_kept() -> None:
    graph = snapshot()
    assert graph.relationship_count == 5 and graph.version == 7
    hood = graph.neighbours(["m1"], hops=1, cap=50)
    paths = {path.id: path.relation_text() for path in hood.paths()}
    assert paths == {"p1": "directed_by", "e1": "mentions"}
    back = graph.neighbours(["p1"], hops=1, cap=50)
    assert {path.relation_text() for path in back.paths()} == {"inverse of directed_by"}


def test_two_hops_never_step_back_to_the_seed_and_name_the_node_between() -> None:
    hood = snapshot().neighbours(["m1"], hops=2, cap=50)
    assert hood.document_ids() == {"p1", "m2", "m3"}  # e1 is an entity: no document
    m3 = next(path for path in hood.paths({"m3"}))
    assert m3.relation_text() == "directed_by -> [Michael Mann] -> inverse of directed_by"
    assert hood.vias({"m3"}) == {"p1"}
    assert hood.source == "snapshot v7"


def test_a_hub_gives_its_first_cap_relationships_documents_first() -> None:
    nodes = [("hub", "entity", "Hub"), *((f"n{i}", "entity", None) for i in range(5))]
    nodes += [(f"d{i}", "passage", None) for i in range(5)]
    relationships = [("hub", f"n{i}", "rel") for i in range(5)]
    relationships += [(f"d{i}", "hub", "mentions") for i in range(5)]
    graph = GraphSnapshot.build(1, nodes, relationships)
    first = graph.neighbours(["hub"], hops=1, cap=3)
    assert [path.id for path in first.paths()] == ["d0", "d1", "d2"]
    # From d0: the hub is one step; from the hub, three more, none back to d0.
    second = graph.neighbours(["d0"], hops=2, cap=3)
    assert {p.id for p in second.paths() if p.hops == 2} == {"d1", "d2", "d3"}


def test_the_walk_sees_seeds_first_and_only_other_nodes_as_documents() -> None:
    hood = snapshot().neighbours(["m1", "missing"], hops=2, cap=50)
    reach = hood.reach(["m1", "missing"])
    assert list(reach.nodes[:2]) == ["m1", "missing"]
    documents = {node for node, flag in zip(reach.nodes, reach.documents, strict=True) if flag}
    assert documents == {"p1", "m2", "m3"}
    edges = {
        frozenset((reach.nodes[a], reach.nodes[b]))
        for a, b in zip(reach.sources, reach.targets, strict=True)
    }
    assert edges == {
        frozenset(pair)
        for pair in [("m1", "p1"), ("m1", "e1"), ("p1", "m2"), ("p1", "m3"), ("e1", "m2")]
    }


def test_the_bridge_reaches_neighbours_and_the_documents_of_mentioned_entities_only() -> None:
    """From Heat: Michael Mann (a neighbour) and Collateral (through Los Angeles, an
    entity both mention), not Mann's other films (two hops through a document); the
    Neo4j-shaped rows give the same set."""
    hood = snapshot().neighbours(["m1"], hops=2, cap=50)
    assert hood.bridged_documents() == {"p1", "m2"}
    assert hood.around(None).bridged_documents() == {"p1", "m2"}


def test_the_bridge_through_a_hub_takes_its_first_cap_documents() -> None:
    nodes = [("hub", "entity", "Hub"), *((f"d{i}", "passage", None) for i in range(6))]
    graph = GraphSnapshot.build(1, nodes, [(f"d{i}", "hub", "mentions") for i in range(6)])
    hood = graph.neighbours(["d0"], hops=2, cap=3)
    assert hood.bridged_documents() == {"d1", "d2", "d3"}


# A corpus graph: triples between entities carry the passage they were read from.
PASSAGE_NODES = [
    ("p1", "passage", "Acme history"),
    ("p2", "passage", "A leaked memo"),  # hidden from the caller below
    ("d9", "passage", "Evilcorp's annual report"),
    ("entity:acme", "entity", "acme"),
    ("entity:evilcorp", "entity", "evilcorp"),
    ("entity:oslo", "entity", "oslo"),
]
PASSAGE_RELATIONSHIPS = [
    ("p1", "entity:acme", "mentions"),
    ("p1", "entity:oslo", "mentions"),
    ("entity:acme", "entity:oslo", "is based in", "p1"),
    ("entity:acme", "entity:evilcorp", "is secretly owned by", "p2"),
    ("p2", "entity:acme", "mentions"),
    ("p2", "entity:evilcorp", "mentions"),
    ("d9", "entity:evilcorp", "mentions"),
    ("entity:oslo", "entity:evilcorp", "hosts", "gone"),  # its passage was deleted
]


def test_the_evidence_of_a_neighbourhood_is_its_documents_and_its_edges_passages() -> None:
    hood = GraphSnapshot.build(1, PASSAGE_NODES, PASSAGE_RELATIONSHIPS).neighbours(
        ["entity:acme"], hops=2, cap=50
    )
    assert hood.evidence_ids() == {"p1", "p2", "d9"}
    assert hood.around(None).evidence_ids() == {"p1", "p2", "d9"}  # Neo4j-shaped rows too


def test_without_a_hidden_passage_its_edges_and_what_only_they_reach_are_gone() -> None:
    """The walk, its paths and its explain see only steps the caller may read: the edge
    read from the hidden memo, the memo itself and the report reached only through them."""
    hood = GraphSnapshot.build(1, PASSAGE_NODES, PASSAGE_RELATIONSHIPS).neighbours(
        ["entity:acme"], hops=2, cap=50
    )
    seen = {path.id: path.relation_text() for path in hood.paths()}
    assert seen["entity:evilcorp"] == "is secretly owned by"  # what a hidden passage says
    for shown in (hood.without({"p2"}), hood.around(None).without({"p2"})):
        paths = {path.id: path.relation_text() for path in shown.paths()}
        assert set(paths) == {"p1", "entity:oslo"}
        assert paths["entity:oslo"] == "is based in"
        reach = shown.reach(["entity:acme"])
        assert not {"p2", "d9", "entity:evilcorp"} & set(reach.nodes)
    assert hood.without(set()) is hood


def test_a_path_names_the_passages_its_edges_were_read_from() -> None:
    """A cached walk was re-checked against its seeds, boosts and triple seeds' passages:
    a path through an edge the memo alone gave was served after DLS hid the memo. The
    passages behind a path are now a rewrite's sources; a document between is not one
    (its title is fetched as the caller, which the cache check keeps)."""
    graph = GraphSnapshot.build(1, PASSAGE_NODES, PASSAGE_RELATIONSHIPS)
    for hood in (graph.neighbours(["entity:acme"], hops=2, cap=50),
                 graph.neighbours(["entity:acme"], hops=2, cap=50).around(None)):  # fmt: skip
        paths = {path.id: path for path in hood.paths()}
        assert passages_behind([paths["entity:evilcorp"]]) == {"p2"}
        assert passages_behind([paths["entity:oslo"]]) == {"p1"}
        assert passages_behind([paths["p1"]]) == set()  # a mention: its own passage


def test_without_text_facts_only_the_documents_own_relations_are_left() -> None:
    """For a caller not shown the passages' text: no entity (named by what a passage
    says), no triple between them; Heat's director and his films are relations the
    documents have of their own. The copy and Neo4j's rows agree."""
    corpus = GraphSnapshot.build(1, PASSAGE_NODES, PASSAGE_RELATIONSHIPS)
    for hood in (corpus.neighbours(["p1"], hops=2, cap=50),
                 corpus.neighbours(["p1"], hops=2, cap=50).around(None)):  # fmt: skip
        assert hood.paths() and hood.without_text_facts().paths() == []
    movies = snapshot().neighbours(["m1"], hops=2, cap=50)
    for hood in (movies.without_text_facts(), movies.around(None).without_text_facts()):
        assert {path.id: path.relation_text() for path in hood.paths()} == {
            "p1": "directed_by",
            "m2": "directed_by -> [Michael Mann] -> inverse of directed_by",
            "m3": "directed_by -> [Michael Mann] -> inverse of directed_by",
        }
        assert hood.bridged_documents() == {"p1"}  # Collateral was reached by Los Angeles
    # A link read from Heat's text (HotpotQA's title links carry their passage) goes too.
    linked = GraphSnapshot.build(1, NODES, [*RELATIONSHIPS, ("m1", "m3", "links_to", "m1")])
    hood = linked.neighbours(["m1"], hops=1, cap=50)
    for shown in (hood.without_text_facts(), hood.around(None).without_text_facts()):
        assert {path.id for path in shown.paths()} == {"p1"}


BRAND_ACME = FieldEvidence.of_value("s1", "brand", "Acme")
SHOP_NODES = [
    ("s1", "document", None),
    ("s2", "document", None),
    ("entity:acme", "entity", "Acme"),
]
SHOP_RELATIONSHIPS = [
    ("s1", "entity:acme", "brand", BRAND_ACME.as_stored()),
    ("s2", "entity:acme", "brand", FieldEvidence.of_value("s2", "brand", "Acme").as_stored()),
]


def test_an_edge_read_from_a_field_goes_with_its_evidence_in_both_shapes() -> None:
    """A caller who may read s1 but not its `brand` is not led from s1 to s2 by it: the
    edge's evidence is the field, not the document, and no string stands for it."""
    hood = GraphSnapshot.build(1, SHOP_NODES, SHOP_RELATIONSHIPS).neighbours(["s1"], hops=2, cap=50)
    rows = hood.around(None)
    for shape in (hood, rows):
        evidence = shape.evidence_ids()
        assert BRAND_ACME in evidence and "s2" in evidence
        assert shape.field_evidence() == {e for e in evidence if isinstance(e, FieldEvidence)}
        assert len(shape.field_evidence()) == 2
        assert {path.id for path in shape.paths()} == {"entity:acme", "s2"}
        assert shape.without({str(BRAND_ACME.as_stored())}).paths()  # a string is no gate
        assert shape.without({BRAND_ACME}).paths() == []
        assert shape.without({BRAND_ACME}).bridged_documents() == set()
