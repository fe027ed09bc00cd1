"""Attaching an index kgqr did not build as a knowledge base: its field map checked
against its mapping and recorded in kgqr-meta. Nothing is written to the index itself,
then or later; detaching removes only what kgqr made (its meta entry, graph, job records).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kgqr_core.embedder import get_embedder
from plugin import installer, kb_meta, schema
from plugin.field_map import (
    FieldMap,
    check_field_map,
    index_mapping,
    mapped_fields,
    suggest_field_map,
)
from plugin.kb_meta import DocumentStructure, KnowledgeBaseMeta


class AttachRefused(ValueError):
    """The index cannot be attached as asked: each reason on its own line."""


@dataclass(frozen=True)
class FieldChoices:
    """What the team chose at `kgqr kb attach`; None or empty: what the mapping suggests."""

    text_fields: dict[str, float] | None = None
    title_field: str | None = None
    body_field: str | None = None
    vector_field: str | None = None
    no_vectors: bool = False
    vector_model: str | None = None
    entity_fields: tuple[str, ...] = ()
    reference_fields: tuple[str, ...] = ()


def mapping_of(client: Any, index: str) -> dict[str, Any]:
    """The index's mapping, read with kgqr's ingest account (which needs only
    `indices:admin/mappings/get` on it, and `read` for graph sources and sync)."""
    from opensearchpy.exceptions import AuthorizationException, NotFoundError

    if index.startswith("kgqr-"):
        raise AttachRefused(f"[{index}] is one of kgqr's own indices: attach a team's index")
    try:
        return index_mapping(client.indices.get_mapping(index=index))
    except NotFoundError:
        raise AttachRefused(f"no index or alias [{index}]: check the name") from None
    except AuthorizationException:
        raise AttachRefused(
            f"kgqr's ingest account may not read [{index}]'s mapping: grant it "
            "indices:admin/mappings/get and read on the index (docs/attached-indices.md)"
        ) from None


def field_map_for(index: str, mapping: dict[str, Any], chosen: FieldChoices) -> FieldMap:
    """The suggested map with the team's choices over it."""
    suggested = suggest_field_map(index, mapping)
    vector = None if chosen.no_vectors else (chosen.vector_field or suggested.vector_field)
    return suggested.model_copy(
        update={
            "text_fields": chosen.text_fields or suggested.text_fields,
            # No --text: each search reads the fields the caller's own query names.
            "follow_query_fields": not chosen.text_fields,
            "title_field": chosen.title_field or suggested.title_field,
            "body_field": chosen.body_field or suggested.body_field,
            "vector_field": vector,
            "vector_model": chosen.vector_model if vector else None,
            "entity_fields": list(chosen.entity_fields),
            "reference_fields": list(chosen.reference_fields),
        }
    )


def checked(field_map: FieldMap, mapping: dict[str, Any]) -> FieldMap:
    """The map with its vectors' dimension read from the mapping, or AttachRefused with
    every contradiction found (loading the named model, to know its vectors' size)."""
    dimension = get_embedder(field_map.vector_model).dimension if field_map.vector_model else None
    problems = check_field_map(field_map, mapping, dimension)
    if problems:
        raise AttachRefused("\n".join(problems))
    mapped = mapped_fields(mapping).get(field_map.vector_field or "")
    return field_map.model_copy(update={"dimension": mapped.dimension if mapped else None})


def attach(client: Any, kb: str, field_map: FieldMap) -> KnowledgeBaseMeta:
    """Record the attached index in kgqr-meta (refused for a name kgqr's own KB has)."""
    schema.check_kb_name(kb)
    existing = kb_meta.load(client, kb) if client.indices.exists(index=schema.META_INDEX) else None
    if existing is not None and existing.attached is None:
        raise AttachRefused(f"{kb!r} is a knowledge base kgqr ingested: choose another name")
    for other in attached_knowledge_bases(client):
        if (
            other.kb != kb
            and other.attached is not None
            and other.attached.index == field_map.index
        ):
            # A search names an index: it can be rewritten with one knowledge base's graph.
            raise AttachRefused(
                f"[{field_map.index}] is already attached as {other.kb!r}: detach it first"
            )
    installer.install_meta_index(client)
    meta = KnowledgeBaseMeta(
        kb=kb,
        structure=DocumentStructure(types={"document": list(field_map.text_fields)}),
        embedder=field_map.vector_model or "",
        dimension=field_map.dimension or 0,
        attached=field_map,
    )
    if existing is not None:  # a re-attach replaces the map, keeps what graph jobs found
        meta = meta.model_copy(update={"structure": existing.structure})
        client.delete(index=schema.META_INDEX, id=kb, refresh=True)
    return kb_meta.save(client, meta)


def attached_knowledge_bases(client: Any) -> list[KnowledgeBaseMeta]:
    """Every knowledge base kgqr-meta lists, own and attached, by name."""
    if not client.indices.exists(index=schema.META_INDEX):
        return []
    body = {"size": 1000, "sort": [{"kb": "asc"}], "query": {"match_all": {}}}
    hits = client.search(index=schema.META_INDEX, body=body)["hits"]["hits"]
    return [KnowledgeBaseMeta.model_validate(hit["_source"]) for hit in hits]
