"""Attaching an index kgqr did not build as a knowledge base: its field map checked
against its mapping and recorded in kgqr-meta. Nothing is written to the index itself,
then or later; detaching removes only what kgqr made (its meta entry, graph, job records).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kgqr_core.embedder import embedder_dimension
from plugin import installer, kb_meta, schema
from plugin.field_map import (
    FieldMap,
    check_field_map,
    index_mapping,
    mapped_fields,
    searchable_text_fields,
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
    id_field: str | None = None


# Characters an index or alias name cannot hold, and those that make a name a pattern, a
# list or date math (`*`, `,`, `<`): a search names one index or alias to be rewritten.
NOT_ONE_NAME = re.compile(r'[*,<>|"\\/?# :]|^[_.+-]')


def mapping_of(client: Any, index: str) -> dict[str, Any]:
    """The mapping of the one index (or single-index alias) `index` names, read with kgqr's
    ingest account (which needs only `indices:admin/mappings/get` on it, and `read` for
    graph sources and sync)."""
    from opensearchpy.exceptions import AuthorizationException, NotFoundError

    if NOT_ONE_NAME.search(index) or index == "_all":
        raise AttachRefused(f"[{index}] is not one index or alias name (no patterns or lists)")
    if index.startswith("kgqr-"):  # by its name, whether or not it exists yet
        raise AttachRefused(f"[{index}] is one of kgqr's own indices: attach a team's index")
    try:
        answer = client.indices.get_mapping(index=index)
    except NotFoundError:
        raise AttachRefused(f"no index or alias [{index}]: check the name") from None
    except AuthorizationException:
        raise AttachRefused(
            f"kgqr's ingest account may not read [{index}]'s mapping: grant it "
            "indices:admin/mappings/get and read on the index (docs/attached-indices.md)"
        ) from None
    if any(name.startswith("kgqr-") for name in answer):
        raise AttachRefused(f"[{index}] is one of kgqr's own indices: attach a team's index")
    if any(name.startswith(f".ds-{index}-") for name in answer):
        raise AttachRefused(
            f"[{index}] is a data stream: it rolls over to new backing indices, and kgqr's "
            "graph is keyed by _id within one index (searches of it pass through kgqr as sent)"
        )
    if len(answer) > 1:
        # The graph is keyed by _id, which is unique only within one index: an id two of
        # them share would be one node, and a caller's right to one would read as both.
        raise AttachRefused(
            f"[{index}] is an alias over {len(answer)} indices ({', '.join(sorted(answer))}): "
            "attach an index, or an alias over one"
        )
    return index_mapping(answer)


def field_map_for(index: str, mapping: dict[str, Any], chosen: FieldChoices) -> FieldMap:
    """The suggested map with the team's choices over it."""
    suggested = suggest_field_map(index, mapping)
    vector = None if chosen.no_vectors else (chosen.vector_field or suggested.vector_field)
    return suggested.model_copy(
        update={
            "text_fields": chosen.text_fields or suggested.text_fields,
            # No --text: each search reads the fields the caller's own query names.
            "follow_query_fields": not chosen.text_fields,
            "word_fields": [] if chosen.text_fields else searchable_text_fields(mapping),
            "title_field": chosen.title_field or suggested.title_field,
            "body_field": chosen.body_field or suggested.body_field,
            "vector_field": vector,
            "vector_model": chosen.vector_model if vector else None,
            "entity_fields": list(chosen.entity_fields),
            "reference_fields": list(chosen.reference_fields),
            "id_field": chosen.id_field,
        }
    )


def checked(field_map: FieldMap, mapping: dict[str, Any]) -> FieldMap:
    """The map with its vectors' dimension read from the mapping, or AttachRefused with
    every contradiction found (the named model gives its vectors' size)."""
    dimension = embedder_dimension(field_map.vector_model) if field_map.vector_model else None
    problems = check_field_map(field_map, mapping, dimension)
    if problems:
        raise AttachRefused("\n".join(problems))
    mapped = mapped_fields(mapping).get(field_map.vector_field or "")
    return field_map.model_copy(update={"dimension": mapped.dimension if mapped else None})


@dataclass(frozen=True)
class IndexSettings:
    """What kgqr reads of a team index's settings, in one request: its uuid (which an
    index made again under its name does not keep) and its default search pipeline.
    `readable` False where the account may not read them (a right beyond the two attach
    and sync need: indices:monitor/settings/get)."""

    readable: bool
    uuid: str | None = None
    default_search_pipeline: str | None = None


def index_settings(client: Any, index: str) -> IndexSettings:
    from opensearchpy.exceptions import AuthorizationException, NotFoundError

    try:
        answer = client.indices.get_settings(
            index=index, name="index.uuid,index.search.default_pipeline"
        )
    except (AuthorizationException, NotFoundError):
        return IndexSettings(readable=False)
    for body in answer.values():  # the one index behind the name (sync refuses several)
        found = body.get("settings", {}).get("index", {})
        pipeline = found.get("search", {}).get("default_pipeline")
        named = str(pipeline) if pipeline and pipeline != "_none" else None
        return IndexSettings(True, found.get("uuid"), named)
    return IndexSettings(readable=False)


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
    elsewhere = existing.attached.index if existing and existing.attached else field_map.index
    if elsewhere != field_map.index:  # its graph is keyed by the other index's ids
        raise AttachRefused(
            f"{kb!r} is attached to [{elsewhere}]: detach it first "
            f"(kgqr kb detach {kb}) to attach [{field_map.index}] under this name"
        )
    # The same index again: the new map replaces the old, and what graph jobs, sync and
    # the agent's plans recorded stays.
    changes = {"structure": meta.structure, "embedder": meta.embedder,
               "dimension": meta.dimension, "attached": field_map}  # fmt: skip
    return kb_meta.record(client, kb, changes, create=meta)


def attached_knowledge_bases(client: Any) -> list[KnowledgeBaseMeta]:
    """Every knowledge base kgqr-meta lists, own and attached, by name."""
    if not client.indices.exists(index=schema.META_INDEX):
        return []
    body = {"size": schema.META_READ_SIZE, "sort": [{"kb": "asc"}], "query": {"match_all": {}}}
    hits = client.search(index=schema.META_INDEX, body=body)["hits"]["hits"]
    return [KnowledgeBaseMeta.model_validate(hit["_source"]) for hit in hits]
