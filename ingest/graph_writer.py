"""Batched, parameterised writes into Neo4j: one UNWIND statement per relation type, and
one for all documents.

Relationship types cannot be query parameters, so they are interpolated only after
``plugin.schema`` has reduced them to ``[A-Za-z0-9_]``; documents' labels (reduced the
same way) are dynamic labels (Neo4j 5.26, `plugin.installer.check_neo4j_version`); every
value is a parameter.
Relations go through kgqr's ``kgqr.mergeRelations`` procedure (``plugin/neo4j``) when the
server has it: the same MERGE, without Cypher's per-row cost.
Nodes are MERGEd on (kb, id), so a re-run or a relation arriving before its documents
never duplicates a node.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from ingest.records import CorpusTriple, Document, Link, Mention, Relation
from kgqr_core.ids import entity_id
from plugin.neo4j import procedures
from plugin.schema import node_label, relation_type

BATCH = 5_000
PROCEDURE_BATCH = 20_000


def _run_batched(driver: Any, query: str, rows: list[dict[str, Any]], **params: Any) -> None:
    for start in range(0, len(rows), BATCH):
        driver.execute_query(query, rows=rows[start : start + BATCH], **params)


def write_documents(driver: Any, kb: str, documents: Sequence[Document]) -> None:
    """Documents of distinct ids (a chunk keeps the last given of each: labels are read
    for all rows before any is written). A node retyped loses its old type's label: a
    statement per label left it every label it had had."""
    rows = [
        {"id": doc.id, "type": doc.type, "name": doc.title, "label": node_label(doc.type)}
        for doc in documents
    ]
    _run_batched(
        driver,
        "UNWIND $rows AS row MERGE (n:Node {kb: $kb, id: row.id}) "
        "WITH n, row, [label IN labels(n) WHERE NOT label IN ['Node', 'Entity', row.label]] "
        "AS stale REMOVE n:$(stale) SET n:$(row.label), n.type = row.type, n.name = row.name",
        rows,
        kb=kb,
    )


def write_relations(
    driver: Any, kb: str, relations: Sequence[Relation], *, procedure: bool | None = None
) -> None:
    """MERGE typed relations, through ``kgqr.mergeRelations`` when the server has it (the
    Neo4j that ``kgqr services`` runs does) and through the equivalent UNWIND statement per
    relation type otherwise. ``procedure`` forces a path."""
    if procedure is None:
        procedure = procedures.RELATION_MERGE in procedures.installed(driver)
    if procedure:
        _call_relation_merge(driver, kb, relations)
        return
    by_type: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rel in relations:
        by_type[relation_type(rel.type)].append(
            {"source": rel.source, "target": rel.target, "properties": dict(rel.properties)}
        )
    for rel_type, rows in by_type.items():
        _run_batched(
            driver,
            f"UNWIND $rows AS row "
            f"MERGE (s:Node {{kb: $kb, id: row.source}}) "
            f"MERGE (t:Node {{kb: $kb, id: row.target}}) "
            f"MERGE (s)-[r:`{rel_type}`]->(t) SET r += row.properties",
            rows,
            kb=kb,
        )


def _call_relation_merge(driver: Any, kb: str, relations: Sequence[Relation]) -> None:
    """All types in one transaction, as columns: Bolt moves 5,000 row maps in ~20 ms and
    the same values as lists in ~6, and a statement per type meant a commit per type."""
    for start in range(0, len(relations), PROCEDURE_BATCH):
        batch = relations[start : start + PROCEDURE_BATCH]
        properties = [dict(rel.properties) for rel in batch]
        driver.execute_query(
            f"CALL {procedures.RELATION_MERGE}($kb, $types, $sources, $targets, $properties) "
            "YIELD created RETURN created",
            kb=kb, types=[relation_type(rel.type) for rel in batch],
            sources=[rel.source for rel in batch], targets=[rel.target for rel in batch],
            properties=properties if any(properties) else None,
        )  # fmt: skip


def _merge_entity(var: str, key: str) -> str:
    """MERGE an entity node from row.<key> (its id) and row.<key>_name."""
    return (
        f"MERGE ({var}:Node {{kb: $kb, id: row.{key}}}) "
        f"ON CREATE SET {var}:Entity, {var}.type = 'entity', {var}.name = row.{key}_name "
    )


# An attached index's document as a node (type `document`: the strategies score and show
# only nodes with a document), MERGEd from row.<key>.
DOCUMENT_NODE = "MERGE ({v}:Node {{kb: $kb, id: row.{key}}}) ON CREATE SET {v}.type = 'document' "


def write_document_nodes(driver: Any, kb: str, ids: Sequence[str]) -> None:
    """Nodes for an attached index's documents, for mentions and triples read from them to
    hang on."""
    _run_batched(
        driver,
        "UNWIND $rows AS row " + DOCUMENT_NODE.format(v="n", key="id"),
        [{"id": doc_id} for doc_id in ids],
        kb=kb,
    )


def remove_field_edges(driver: Any, kb: str, relations: Sequence[str], ids: Sequence[str]) -> None:
    """The edges changed documents' fields made (their new values are written after): only
    those read from a field (they carry its evidence), not a relations file's edge that
    happens to share a field's name."""
    if relations and ids:
        driver.execute_query(
            "MATCH (s:Node {kb: $kb})-[r]->() WHERE s.id IN $ids AND r.relation IN $relations "
            "AND r.field_evidence IS NOT NULL DELETE r",
            kb=kb, ids=list(ids), relations=list(relations),
        )  # fmt: skip


def write_links(driver: Any, kb: str, links: Sequence[Link]) -> None:
    """An attached index's edges: its documents are nodes of type `document` (the strategies
    score and show only nodes with a document), the entities its values name are shared
    entity nodes, as a passage's mentions are."""
    by_type: dict[tuple[str, bool], list[dict[str, Any]]] = defaultdict(list)
    for link in links:
        row: dict[str, Any] = {
            "source": link.source,
            "relation": link.type,
            "evidence": link.evidence,
        }
        if link.entity is not None:
            row |= {"entity": entity_id(link.entity), "entity_name": link.entity}
        else:
            row["target"] = link.target
        by_type[(relation_type(link.type), link.entity is not None)].append(row)
    for (rel_type, to_entity), rows in by_type.items():
        target = (
            _merge_entity("t", "entity") if to_entity else DOCUMENT_NODE.format(v="t", key="target")
        )
        _run_batched(
            driver,
            "UNWIND $rows AS row "
            + DOCUMENT_NODE.format(v="s", key="source")
            + target
            + f"MERGE (s)-[r:`{rel_type}`]->(t) SET r.relation = row.relation, "
            # A field's edge a relations file repeats keeps its field's evidence.
            + "r.field_evidence = coalesce(row.evidence, r.field_evidence)",
            rows,
            kb=kb,
        )


def write_mentions(driver: Any, kb: str, mentions: Sequence[Mention]) -> None:
    rows = [
        {"passage": m.passage_id, "entity": entity_id(m.entity), "entity_name": m.entity,
         "evidence": m.evidence}
        for m in mentions
    ]  # fmt: skip
    _run_batched(
        driver,
        "UNWIND $rows AS row "
        + _merge_entity("e", "entity")
        + "MERGE (p:Node {kb: $kb, id: row.passage}) MERGE (p)-[m:MENTIONS]->(e) "
        + "SET m.field_evidence = row.evidence",
        rows,
        kb=kb,
    )


def write_triples(driver: Any, kb: str, triples: Sequence[CorpusTriple]) -> None:
    """Entity-to-entity facts as RELATION edges carrying relation text, TTR and source
    passage; the passage MENTIONS both ends. One edge per triple id."""
    rows = [
        {
            "triple_id": t.triple_id,
            "head": entity_id(t.head), "head_name": t.head,
            "tail": entity_id(t.tail), "tail_name": t.tail,
            "relation": t.relation, "ttr": t.ttr, "passage": t.passage_id,
            "evidence": t.evidence,
        }
        for t in triples
    ]  # fmt: skip
    _run_batched(
        driver,
        "UNWIND $rows AS row "
        + _merge_entity("h", "head")
        + _merge_entity("t", "tail")
        + "MERGE (h)-[r:RELATION {triple_id: row.triple_id}]->(t) "
        "SET r.relation = row.relation, r.ttr = row.ttr, r.passage_id = row.passage, "
        "r.field_evidence = row.evidence "
        + "MERGE (p:Node {kb: $kb, id: row.passage}) "
        + "MERGE (p)-[mh:MENTIONS]->(h) MERGE (p)-[mt:MENTIONS]->(t) "
        + "SET mh.field_evidence = row.evidence, mt.field_evidence = row.evidence",
        rows,
        kb=kb,
    )
