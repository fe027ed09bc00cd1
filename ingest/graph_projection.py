"""The graph's search-time copy in OpenSearch: one document per node of a knowledge base,
keyed by the node's id, holding the node's first edges. The LLM-free strategies read it
with one `_mget` a hop (query_rewriter/graph/projection.py), so the engine shards and
replicates the graph like the documents, and a search's graph lookup costs the same at a
million relations as at twenty million.

Neo4j stays the store of record. Every write to a KB's graph re-reads the nodes it touched
(and the neighbours of a document whose type it set: their edges name it) and rewrites
their documents here before the graph version is raised. Searches read the copy live, as
they read Neo4j: what a chunk writes shows as it lands. A node keeps at most `edges`
edges, in the order Neo4j expands them: a search's hub cap takes the first ones, as Neo4j's
LIMIT does.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from ingest import index_shards
from ingest.bulk_requests import Operation, bulk_items
from ingest.opensearch_writer import TransientBulkError, the_engines_trouble
from kgqr_core.settings import Settings
from plugin import installer, schema
from plugin.schema import GraphCopyState

T = TypeVar("T")
READ_BATCH = 2_000  # nodes per Neo4j read (their writes are cut by size: bulk_requests)

# A node's first `edges` edges as [other end, its type, relation, outgoing, evidence]: the
# same expansion, and the same values, as the first hop of store.NEIGHBOURS. `version`:
# the statement's start on Neo4j's clock, in nanoseconds (see project_nodes).
NODE_EDGES = """
WITH datetime.statement() AS started
UNWIND $ids AS id
OPTIONAL MATCH (s:Node {kb: $kb, id: id})
CALL (s) {
  OPTIONAL MATCH (s)-[r]-(n:Node)
  WITH r, n LIMIT $edges
  RETURN collect(CASE WHEN n IS NULL THEN null ELSE [
    n.id, n.type, coalesce(r.relation, toLower(type(r))), startNode(r) = s,
    coalesce(r.field_evidence, r.passage_id)
  ] END) AS edges
}
RETURN id, s IS NOT NULL AS found, s.type AS type, s.name AS name, edges,
       started.epochSeconds * 1000000000 + started.nanosecond AS version
"""
NODE_IDS = """
MATCH (n:Node {kb: $kb}) WHERE n.id > $after
RETURN n.id AS id ORDER BY n.id LIMIT $batch
"""
EXISTING = """
WITH datetime.statement() AS started
UNWIND $ids AS id
OPTIONAL MATCH (n:Node {kb: $kb, id: id})
RETURN collect(n.id) AS ids, started.epochSeconds * 1000000000 + started.nanosecond AS version
"""
# Documents whose node exists with another type (or none: a relation written before its
# document makes an untyped node): their neighbours' documents hold the old type.
RETYPED = """
UNWIND $rows AS row
MATCH (n:Node {kb: $kb, id: row.id})
WHERE n.type IS NULL OR n.type <> row.type
RETURN collect(n.id) AS ids
"""
NEIGHBOUR_IDS = """
UNWIND $ids AS id
MATCH (:Node {kb: $kb, id: id})--(n:Node)
RETURN collect(DISTINCT n.id) AS ids
"""


def state(opensearch: Any, kb: str) -> GraphCopyState | None:
    """The KB's copy, or None where it has none (a KB made before copies were)."""
    found = opensearch.indices.get_mapping(index=schema.graph_index(kb), ignore_unavailable=True)
    return GraphCopyState.of_mapping(next(iter(found.values()))["mappings"]) if found else None


def create(
    opensearch: Any, kb: str, edges: int, *, complete: bool, shards: int = 1, replicas: str = "0-1"
) -> None:
    """The KB's projection index, unless it exists. `complete`: a new KB's (its graph is
    empty, so its copy is whole); a KB that already has a graph is copied by `project_all`."""
    index = schema.graph_index(kb)
    if opensearch.indices.exists(index=index):
        return
    # The template's body given in full: `kgqr kb attach` makes a copy on a cluster where
    # no ingest has installed kgqr's templates.
    body = schema.kb_index_body("graph", dimension=0)
    body["settings"]["index"].update(
        {"number_of_shards": shards, **installer.replica_settings(replicas)}
    )
    body["mappings"].update(GraphCopyState(complete, edges).as_mapping())
    installer.create_index(opensearch, index, body)


def create_for_new_kb(settings: Settings, opensearch: Any, kb: str) -> None:
    """A new KB's copy, empty and so complete, sharded as its documents are."""
    create(opensearch, kb, settings.graph.projection_edges, complete=True, **_layout(settings))


def _layout(settings: Settings) -> dict[str, Any]:
    return {"shards": settings.opensearch.kb_shards, "replicas": settings.opensearch.kb_replicas}


def copy_graph(
    settings: Settings,
    neo4j: Any,
    opensearch: Any,
    kb: str,
    progress: Callable[[int], None] = lambda done: None,
) -> tuple[int, int]:
    """`project_all` with the settings' edges a node, shards and replicas."""
    return project_all(
        neo4j, opensearch, kb, settings.graph.projection_edges,
        progress=progress, **_layout(settings),
    )  # fmt: skip


def node_count(neo4j: Any, kb: str) -> int:
    records, _, _ = neo4j.execute_query("MATCH (n:Node {kb: $kb}) RETURN count(n) AS n", kb=kb)
    return int(records[0]["n"])


def _mark(opensearch: Any, kb: str, copy: GraphCopyState) -> None:
    opensearch.indices.put_mapping(index=schema.graph_index(kb), body=copy.as_mapping())


def node_document(
    node_id: str, kind: str | None, name: str | None, edges: list[list[Any]]
) -> dict[str, Any]:
    """A node as the projection holds it: its edges as columns (a fifth of the bytes of one
    object an edge, which a search parses fifty of)."""
    return {
        "id": node_id,
        "type": kind,
        "name": name,
        "edges": {
            "n": [edge[0] for edge in edges],
            "t": [edge[1] for edge in edges],
            "r": [edge[2] for edge in edges],
            "o": [edge[3] for edge in edges],
            "e": [edge[4] for edge in edges],
        },
    }


def _batches(items: Iterable[T], size: int = READ_BATCH) -> Iterator[list[T]]:
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def project_nodes(neo4j: Any, opensearch: Any, kb: str, ids: Collection[str]) -> int:
    """Rewrite the documents of `ids` from Neo4j as it is now (a node Neo4j no longer has
    loses its document); the number written. Nothing where the KB has no projection.

    Workers write the same node's document concurrently (a hub every chunk touches), and a
    read made before another worker's commit must not overwrite what that worker read
    after it. So each write carries its read's start on Neo4j's one clock as an external
    version, and the engine refuses an older one: whichever read started last, it saw every
    edge committed before the other read began, so the copy ends as Neo4j is."""
    projection = state(opensearch, kb) if ids else None
    if projection is None:
        return 0
    written = 0
    for batch in _batches(sorted(ids)):
        write_nodes(opensearch, kb, read_nodes(neo4j, kb, batch, projection.edges))
        written += len(batch)
    return written


def read_nodes(neo4j: Any, kb: str, ids: list[str], edges: int) -> list[Any]:
    """NODE_EDGES' records for `ids`: what their documents say now, and when it was read."""
    records, _, _ = neo4j.execute_query(NODE_EDGES, kb=kb, ids=ids, edges=edges)
    return list(records)


def write_nodes(opensearch: Any, kb: str, records: list[Any]) -> None:
    """Write (or delete) the nodes' documents, each unless a newer read's is there."""
    operations: list[Operation] = []
    for record in records:
        target = {
            "_index": schema.graph_index(kb), "_id": schema.graph_copy_id(record["id"]),
            "version": record["version"], "version_type": "external_gte",
        }  # fmt: skip
        if record["found"]:
            document = node_document(record["id"], record["type"], record["name"],
                                     record["edges"])  # fmt: skip
            operations.append(({"index": target}, document))
        else:
            operations.append(({"delete": target}, None))
    _bulk(opensearch, kb, operations)


def _bulk(opensearch: Any, kb: str, operations: Sequence[Operation]) -> None:
    """Send versioned writes, in requests the engine takes (ingest/bulk_requests.py); raise
    if any failed other than as expected: a 409 is a newer read's document already there
    (see project_nodes), a delete's 404 one already gone."""
    failed = [
        result
        for verb, result in bulk_items(opensearch, operations, timeout=300)
        if result.get("status", 200) >= 300
        and result["status"] != 409
        and (verb, result["status"]) != ("delete", 404)
    ]
    if any(the_engines_trouble(result["status"]) for result in failed):
        # Pushed back, or the engine's own failure: the chunk is retried, as its documents'
        # writes are. Raised as a plain error, it failed the chunk for good after both
        # stores had its records.
        raise TransientBulkError(f"graph copy of {kb}: pushed back: {failed[0]}")
    if failed:
        raise RuntimeError(f"graph copy of {kb}: {len(failed)} writes failed: {failed[0]}")


def retyped(neo4j: Any, kb: str, documents: Collection[tuple[str, str]]) -> list[str]:
    """Of (id, type) documents about to be written, those whose node exists with another
    type (read before the write): ingest rewrites their neighbours' documents too."""
    rows = [{"id": doc_id, "type": kind} for doc_id, kind in documents]
    if not rows:
        return []
    records, _, _ = neo4j.execute_query(RETYPED, kb=kb, rows=rows)
    return list(records[0]["ids"])


def mark_incomplete(opensearch: Any, kb: str) -> None:
    """After a write to Neo4j whose copy could not be written: searches read Neo4j until
    `kgqr kb project` copies the graph again."""
    copy = state(opensearch, kb)
    if copy is not None:
        _mark(opensearch, kb, GraphCopyState(False, copy.edges))


def neighbours_of(neo4j: Any, kb: str, ids: Collection[str]) -> set[str]:
    """The nodes one edge from `ids`: the ones whose documents change when `ids` lose edges
    (read before the edges go)."""
    found: set[str] = set()
    for batch in _batches(ids):
        records, _, _ = neo4j.execute_query(NEIGHBOUR_IDS, kb=kb, ids=batch)
        found.update(records[0]["ids"])
    return found


def project_all(
    neo4j: Any,
    opensearch: Any,
    kb: str,
    edges: int,
    *,
    shards: int = 1,
    replicas: str = "0-1",
    progress: Callable[[int], None] = lambda done: None,
) -> tuple[int, int]:
    """Copy every node of the KB (a graph made before projections, or after a change of
    `edges`), then remove the documents of nodes Neo4j no longer has; (written, removed).
    Searches keep reading Neo4j until the copy is marked complete at the end; run it again
    after an interruption. Ingest may write meanwhile: the newer read of a node wins
    (project_nodes)."""
    create(opensearch, kb, edges, complete=False, shards=shards, replicas=replicas)
    current = state(opensearch, kb)
    if current is not None and current.edges != edges:  # searches must not take a mix
        _mark(opensearch, kb, GraphCopyState(False, edges))
    written, after = 0, ""
    while True:
        records, _, _ = neo4j.execute_query(NODE_IDS, kb=kb, after=after, batch=READ_BATCH)
        ids = [record["id"] for record in records]
        if not ids:
            break
        written += project_nodes(neo4j, opensearch, kb, ids)
        progress(len(ids))
        after = ids[-1]
    removed = _remove_stale(neo4j, opensearch, kb)
    _mark(opensearch, kb, GraphCopyState(True, edges))
    return written, removed


def _remove_stale(neo4j: Any, opensearch: Any, kb: str) -> int:
    """Delete the documents of nodes Neo4j no longer has. Versioned as writes are, so a
    node made again (and copied) after the check keeps its document. Read shard by shard
    in `_seq_no` order, not by a scroll: ending one is a cluster action, and the right to
    it ends every caller's scrolls (`DELETE _search/scroll/_all`). Only the documents
    there when it began: those written since are of nodes just copied, and following them
    under a busy ingest would keep it reading."""
    index = schema.graph_index(kb)
    began = index_shards.highest_seq_nos(opensearch, index)
    removed = 0
    read = index_shards.every_document(opensearch, index, ["id"], READ_BATCH, until=began)
    for page in _batches(read):
        ids = {hit["_source"]["id"]: hit["_id"] for hit in page}
        records, _, _ = neo4j.execute_query(EXISTING, kb=kb, ids=list(ids))
        gone = set(ids) - set(records[0]["ids"])
        if gone:
            version = records[0]["version"]
            _bulk(opensearch, kb, [
                ({"delete": {"_index": index, "_id": ids[node], "version": version,
                             "version_type": "external_gte"}}, None)
                for node in gone
            ])  # fmt: skip
            removed += len(gone)
    return removed
