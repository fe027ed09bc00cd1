"""The OpenSearch and Neo4j schemas kgqr writes through and reads through.

Templates live as JSON/Cypher files beside this module; a ``"{{name}}"`` placeholder in a
JSON file is replaced by a typed value (the embedder's dimension, pipeline weights).
Index names are derived here only, so ingest and the rewriter cannot disagree on them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

KB_NAME = re.compile(r"\A[a-z0-9][a-z0-9_-]{0,63}\Z")  # \Z: `$` let a trailing newline in
META_INDEX = "kgqr-meta"
# The most knowledge bases kgqr-meta is read for at once: the engine's result window (each
# reader once took the first 1,000, and the 1,001st KB went unseen).
META_READ_SIZE = 10_000
HYBRID_PIPELINE = "kgqr-hybrid"
# Three sub-queries: BM25, k-NN, and the documents the knowledge graph links to the query.
HYBRID_BOOST_PIPELINE = "kgqr-hybrid-boost"
# Indices the proxy writes: every rewrite (for Dashboards), the tuning page's judgments
# and the rankings it showed (so metrics over judgments need no re-run).
QUERY_LOG_INDEX = "kgqr-query-log"
JUDGMENTS_INDEX = "kgqr-judgments"
TUNE_RUNS_INDEX = "kgqr-tune-runs"
PROXY_TEMPLATES = ("query-log", "judgments", "tune-runs")
TEMPLATES = ("documents", "triples", "deadletter", "graph", "vectors", "kb-meta", *PROXY_TEMPLATES)


def check_kb_name(kb: str) -> str:
    """Knowledge-base names become index names: lowercase letters, digits, - and _."""
    if not KB_NAME.match(kb):
        raise ValueError(
            f"invalid knowledge-base name {kb!r}: use 1-64 lowercase letters, digits, - or _"
        )
    return kb


def documents_index(kb: str) -> str:
    return kb_index(kb, "documents")


def kb_of_documents_index(index: str) -> str | None:
    """The knowledge base whose documents `index` holds (documents_index read backwards),
    or None for any other index."""
    kb = index.removeprefix("kgqr-").removesuffix("-documents")
    if len(kb) + len("kgqr--documents") != len(index) or not KB_NAME.match(kb):
        return None
    return kb


def triples_index(kb: str) -> str:
    return kb_index(kb, "triples")


def deadletter_index(kb: str) -> str:
    return kb_index(kb, "deadletter")


@dataclass(frozen=True)
class GraphCopyState:
    """What a graph index's mapping records (its _meta): whether every node of the KB is
    in it, and how many edges a node keeps."""

    complete: bool
    edges: int

    def as_mapping(self) -> dict[str, Any]:
        return {"_meta": {"kgqr_graph": {"complete": self.complete, "edges": self.edges}}}

    @classmethod
    def of_mapping(cls, mapping: dict[str, Any]) -> GraphCopyState | None:
        """From an index's mapping (GET _mapping's `mappings`); None: not a graph copy, or
        one whose record is malformed (read as no copy: Neo4j answers)."""
        meta = mapping.get("_meta", {}).get("kgqr_graph")
        if not isinstance(meta, dict) or not isinstance(meta.get("edges"), int):
            return None
        return cls(meta.get("complete") is True, meta["edges"])


# The engine's limit on a document id, in UTF-8 bytes; a node id (an entity's name, say)
# may be longer.
MAX_DOCUMENT_ID_BYTES = 512


def graph_copy_id(node_id: str) -> str:
    """A node's document id in its graph's copy: the node's id, or for one longer than the
    engine allows, a digest of it (the document keeps the node's id in `id`)."""
    if len(node_id.encode()) <= MAX_DOCUMENT_ID_BYTES:
        return node_id
    return "sha256:" + hashlib.sha256(node_id.encode()).hexdigest()


def vectors_index(kb: str) -> str:
    """kgqr's own vectors of an attached index that has none (`kgqr kb embed`): one
    document per team document, keyed by its `_id`, holding the vector and a digest of
    the text it was made from; read by id only (search/side_vectors.py). No content index
    ends in ``-vectors``."""
    return kb_index(kb, "vectors")


def graph_index(kb: str) -> str:
    """The search-time copy of the KB's graph: one document per node, keyed by its id
    (ingest/graph_projection.py). No content index ends in ``-graph``, so the service
    role can be given this pattern alone."""
    return kb_index(kb, "graph")


def kb_index(kb: str, role: str) -> str:
    """A knowledge base's index for `role` ("documents", "triples", "deadletter", "graph")."""
    return f"kgqr-{check_kb_name(kb)}-{role}"


def generation_index(name: str, generation: int) -> str:
    """The versioned index behind the alias `name` (ingest makes generation 1, each
    re-embed the next). No knowledge base's own index name ends in ``-gN``, so a versioned
    index never collides with another knowledge base's."""
    return f"{name}-g{generation}"


def generation_of(name: str, index: str) -> int | None:
    """`index`'s generation if it is one of `name`'s versioned indices, else None (an
    index of another knowledge base named like ``KB-documents-g…`` is not)."""
    match = re.fullmatch(rf"{re.escape(name)}-g(\d+)", index)
    return int(match.group(1)) if match else None


def _render(node: Any, values: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        return {key: _render(value, values) for key, value in node.items()}
    if isinstance(node, list):
        return [_render(value, values) for value in node]
    if isinstance(node, str) and node.startswith("{{") and node.endswith("}}"):
        return values[node[2:-2]]
    return node


def opensearch_resource(name: str, **values: Any) -> dict[str, Any]:
    text = resources.files("plugin.opensearch").joinpath(f"{name}.json").read_text()
    return dict(_render(json.loads(text), values))


def meta_mapping_update(current: Mapping[str, Any]) -> dict[str, Any]:
    """What an existing kgqr-meta's mapping (`current`: GET _mapping's answer) needs of
    kgqr's: the fields it has not mapped yet, and no mapping of fields kgqr does not
    define. Only those: a field an older kgqr-meta let the engine map first (a
    `document_revision` as `long`) made the whole update a 400, which left every later
    field to the engine too, and mapped as it first saw them."""
    wanted = opensearch_resource("kb-meta-template")["template"]["mappings"]
    mapped = {
        name
        for index in current.values()
        for name in index.get("mappings", {}).get("properties", {})
    }
    missing = {name: field for name, field in wanted["properties"].items() if name not in mapped}
    return {"dynamic": wanted["dynamic"], "properties": missing}


def index_templates(dimension: int) -> dict[str, dict[str, Any]]:
    """Template name -> body, for every index kgqr creates."""
    return {
        f"kgqr-{name}": opensearch_resource(f"{name}-template", dimension=dimension)
        for name in TEMPLATES
    }


def kb_index_body(role: str, dimension: int) -> dict[str, Any]:
    """The settings and mappings of a knowledge base's `role` index ("documents",
    "triples") for vectors of `dimension`: what its template gives, for an index created
    by name (a re-embed's versioned index, which no template pattern matches)."""
    template = opensearch_resource(f"{role}-template", dimension=dimension)["template"]
    return {"settings": template["settings"], "mappings": template["mappings"]}


def proxy_index_templates() -> dict[str, dict[str, Any]]:
    """The templates of the indices the proxy itself writes (none needs the dimension)."""
    return {f"kgqr-{name}": opensearch_resource(f"{name}-template") for name in PROXY_TEMPLATES}


def hybrid_pipeline(weights: tuple[float, ...]) -> dict[str, Any]:
    """The normalisation pipeline for a hybrid query with one weight per sub-query."""
    return opensearch_resource("hybrid-pipeline", weights=list(weights))


def hybrid_pipelines(
    weights: tuple[float, float], boost_weights: tuple[float, float, float]
) -> dict[str, dict[str, Any]]:
    return {
        HYBRID_PIPELINE: hybrid_pipeline(weights),
        HYBRID_BOOST_PIPELINE: hybrid_pipeline(boost_weights),
    }


def neo4j_statements() -> list[str]:
    """The schema's Cypher statements, one per entry, comments dropped."""
    text = resources.files("plugin.neo4j").joinpath("schema.cypher").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("//")]
    return [statement.strip() for statement in " ".join(lines).split(";") if statement.strip()]


# Letters and digits of any script stay (`директор`, `電影`): the names are backtick-quoted
# wherever they enter Cypher, so only what a name cannot hold is replaced.
NOT_NAME_CHARACTERS = re.compile(r"[\W_]+")


def has_name_characters(name: str) -> bool:
    """Whether `name` can become a Neo4j label or relationship type (records are checked
    with this before anything is written, so the stores never disagree)."""
    return bool(NOT_NAME_CHARACTERS.sub("", name))


def relation_type(relation: str) -> str:
    """A relation name as a Neo4j relationship type: ``directed by`` -> ``DIRECTED_BY``."""
    cleaned = NOT_NAME_CHARACTERS.sub("_", relation).strip("_").upper()
    if not cleaned:
        raise ValueError(f"relation {relation!r} has no letters or digits")
    return cleaned if not cleaned[0].isdigit() else f"R_{cleaned}"


def relation_names(relations: Iterable[str]) -> dict[str, str]:
    """Neo4j relationship type -> the KB's relation name, to read relations back in the
    words the KB (and its questions) use."""
    return {relation_type(name): name for name in relations}


def node_label(node_type: str) -> str:
    """A document type as a Neo4j label: ``gene/protein`` -> ``Gene_protein``."""
    cleaned = NOT_NAME_CHARACTERS.sub("_", node_type).strip("_")
    if not cleaned:
        raise ValueError(f"type {node_type!r} has no letters or digits")
    label = cleaned[0].upper() + cleaned[1:]
    return label if not label[0].isdigit() else f"T_{label}"
