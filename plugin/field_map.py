"""Where a knowledge base's documents keep what kgqr reads: which index, which fields hold
words (and how much each counts), which holds vectors and what model made them, and which
hold entities or references to other documents.

kgqr's own knowledge bases all have the same map (`FieldMap.own`); an index a team
attached (`kgqr kb attach`) has the one its mapping allows and its team chose. The map is
checked against the index's mapping when it is made, so a search never meets a field the
index does not have.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kgqr_core.field_evidence import source_paths
from plugin.schema import documents_index

# The fields the read path asks of a hit, as kgqr's own documents name them.
OWN_TEXT_FIELDS = {"title": 2.0, "text": 1.0}
OWN_VECTOR_FIELD = "vector"
# Each of kgqr's own documents keeps its `_id` in this keyword field too (ingest's writer).
OWN_ID_FIELD = "id"
TEXT_TYPES = ("text", "match_only_text")
KEYWORD_TYPES = ("keyword", "constant_keyword", "wildcard")
NUMERIC_TYPES = ("long", "integer", "short", "byte", "double", "float", "half_float",
                 "scaled_float", "unsigned_long")  # fmt: skip
# Field names third-party clients give the text they embedded (LangChain `text`,
# Haystack `content`, LlamaIndex `content`), and a title's usual names: suggested first.
BODY_NAMES = ("text", "content", "body", "page_content", "passage", "description")
TITLE_NAMES = ("title", "name", "headline")


# kgqr-meta's records keep what a newer kgqr wrote into them: read, changed and written
# whole by an older one (a rolling upgrade, a rollback), they lost it (a default's history,
# a field map's fields).
KEEPS_UNKNOWN_FIELDS = ConfigDict(extra="allow")


class FieldMap(BaseModel):
    """A knowledge base's fields. `text_fields` empty: each search uses the fields the
    caller's own query names (an attached index's default, since the team's queries
    already say where its words are)."""

    model_config = KEEPS_UNKNOWN_FIELDS

    index: str
    text_fields: dict[str, float] = Field(default_factory=dict)
    title_field: str | None = None  # what explains and prompts call a document
    body_field: str | None = None  # the text prompts read
    vector_field: str | None = None
    # The text fields kgqr embedded into its own side index (`kgqr kb embed`), for an
    # index with no vector field; `vector_model` and `dimension` are then those vectors'.
    side_vector_fields: list[str] = Field(default_factory=list)
    # A kgqr embedder name or a sentence-transformers folder; None with no vectors.
    vector_model: str | None = None
    dimension: int | None = None
    # Keyword fields whose values become entity nodes (`brand: Acme` -> BRAND -> Acme),
    # and fields holding ids of other documents of the index (`cites: [id, ...]`).
    entity_fields: list[str] = Field(default_factory=list)
    reference_fields: list[str] = Field(default_factory=list)
    # The keyword field a team's relations file and reference fields name documents by
    # (`sku`); None: their `_id`. The graph is keyed by `_id` either way (ingest/document_keys.py).
    id_field: str | None = None
    # Search the fields the caller's own query names rather than `text_fields` (an
    # attached index whose team gave no --text: its queries already say where words are).
    follow_query_fields: bool = False
    # Every text field of the index when it was attached: a query on any of them asks for
    # words, which the graph may find in other documents too (not a structured value).
    word_fields: list[str] = Field(default_factory=list)
    # The index's `index.search.default_pipeline` when it was attached: a rewritten search
    # runs kgqr's hybrid pipeline in its place, so its searches pass through.
    default_search_pipeline: str | None = None

    @classmethod
    def own(cls, kb: str, model: str | None = None, dimension: int | None = None) -> FieldMap:
        """The map of a knowledge base kgqr ingested."""
        return cls(
            index=documents_index(kb),
            text_fields=dict(OWN_TEXT_FIELDS),
            title_field="title",
            body_field="body",
            vector_field=OWN_VECTOR_FIELD,
            vector_model=model,
            dimension=dimension,
        )

    @property
    def has_vectors(self) -> bool:
        """Whether searches have a vector side: the index's own, or kgqr's side index."""
        return bool(self.vector_field or self.side_vector_fields)

    def boosted_text_fields(self) -> list[str]:
        """The text fields as a multi_match names them (`title^2`)."""
        return [_boosted(name, boost) for name, boost in self.text_fields.items()]


def _boosted(name: str, boost: float) -> str:
    return name if boost == 1.0 else f"{name}^{boost:g}"


def parse_boosted(spec: str) -> tuple[str, float]:
    """`title^2` -> ("title", 2.0); `text` -> ("text", 1.0)."""
    name, _, boost = spec.partition("^")
    try:
        value = float(boost) if boost else 1.0
    except ValueError:
        raise ValueError(f"{spec!r}: a boost after ^ must be a number") from None
    if not name or not 0 < value < math.inf:  # an infinite boost: every score infinite
        raise ValueError(f"{spec!r}: expected FIELD or FIELD^BOOST with a positive boost")
    return name, value


@dataclass(frozen=True)
class MappedField:
    path: str
    type: str
    dimension: int | None = None
    space_type: str | None = None
    data_type: str = "float"  # a knn_vector's element type
    # The field whose value it indexes another way (`brand.keyword` of `brand`): the
    # document holds that field's value, and the relation is named after it.
    multi_field_of: str | None = None
    # Under a `nested` object: a plain multi_match cannot reach its words.
    nested: bool = False


def mapped_fields(mapping: Mapping[str, Any]) -> dict[str, MappedField]:
    """Every field of an index mapping (an index's `mappings`, or several indices' answer
    to GET _mapping merged), by dotted path, sub-fields (`title.raw`) included."""
    found: dict[str, MappedField] = {}
    for path, spec, parent, nested in _walk(mapping.get("properties") or {}, "", None, False):
        method = spec.get("method") or {}
        dimension = spec.get("dimension")
        found[path] = MappedField(
            path,
            str(spec.get("type", "object")),
            int(dimension)
            if isinstance(dimension, int | str) and str(dimension).isdigit()
            else None,
            method.get("space_type") or spec.get("space_type"),
            data_type=str(spec.get("data_type", "float")),
            multi_field_of=parent,
            nested=nested,
        )
    return found


def _walk(
    properties: Mapping[str, Any], prefix: str, parent: str | None, nested: bool
) -> Iterator[tuple[str, dict[str, Any], str | None, bool]]:
    """(path, spec, the field it is a multi-field of, whether it is under a nested object)."""
    for name, spec in properties.items():
        if not isinstance(spec, dict):
            continue
        path = f"{prefix}{name}"
        yield path, spec, parent, nested
        inside = nested or spec.get("type") == "nested"
        yield from _walk(spec.get("properties") or {}, f"{path}.", None, inside)
        yield from _walk(spec.get("fields") or {}, f"{path}.", path, inside)


def value_field(path: str, fields: Mapping[str, MappedField]) -> str:
    """The field whose value a document holds for `path`: a multi-field's parent's
    (`brand.keyword` indexes `brand`)."""
    while (mapped := fields.get(path)) is not None and mapped.multi_field_of is not None:
        path = mapped.multi_field_of
    return path


def relation_name(path: str, fields: Mapping[str, MappedField]) -> str:
    """The relation an entity or reference field's edges get: the last name of the field
    holding its value (`brand.keyword` -> brand), not `keyword`."""
    return value_field(path, fields).rsplit(".", 1)[-1]


def index_mapping(answer: Mapping[str, Any]) -> dict[str, Any]:
    """GET INDEX/_mapping's answer (one entry per index behind an alias) as one mapping;
    a field the indices map differently keeps the first's type (attach takes one index:
    ingest/attached_indices.py refuses an alias over several)."""
    properties: dict[str, Any] = {}
    kept: dict[str, Any] = {}
    for entry in answer.values():
        mappings = entry.get("mappings") or {}
        for name, spec in (mappings.get("properties") or {}).items():
            properties.setdefault(name, spec)
        if isinstance(mappings.get("_source"), dict):
            kept.setdefault("_source", mappings["_source"])
    return {"properties": properties, **kept}


def suggest_field_map(index: str, mapping: Mapping[str, Any]) -> FieldMap:
    """A map the mapping allows, from the names teams and clients usually give: the body
    and title text fields, the only knn_vector field, no entity fields (those are a choice
    the team makes, from what it knows its keywords mean)."""
    texts = searchable_text_fields(mapping)
    body = _first_named(texts, BODY_NAMES) or (texts[0] if texts else None)
    title = _first_named([t for t in texts if t != body], TITLE_NAMES)
    vectors = [f for f in mapped_fields(mapping).values() if f.type == "knn_vector"]
    vector = vectors[0] if len(vectors) == 1 else None
    text_fields = {**({title: 2.0} if title else {}), **({body: 1.0} if body else {})}
    return FieldMap(
        index=index,
        text_fields=text_fields,
        title_field=title,
        body_field=body,
        vector_field=vector.path if vector else None,
        dimension=vector.dimension if vector else None,
    )


def searchable_text_fields(mapping: Mapping[str, Any]) -> list[str]:
    """The text fields a multi_match reaches (none under a nested object)."""
    fields = mapped_fields(mapping).values()
    return [f.path for f in fields if f.type in TEXT_TYPES and not f.nested]


def _first_named(paths: list[str], names: tuple[str, ...]) -> str | None:
    """The first of `paths` named one of `names`, in their order: a top-level field before
    one of an object's (`content` before `comments.text`)."""
    for matches in (lambda path, name: path == name,
                    lambda path, name: path.rsplit(".", 1)[-1] == name):  # fmt: skip
        for name in names:
            for path in paths:
                if matches(path, name):
                    return path
    return None


def check_field_map(
    field_map: FieldMap, mapping: Mapping[str, Any], model_dimension: int | None = None
) -> list[str]:
    """What the mapping contradicts in `field_map`, one sentence each (empty: it fits).
    `model_dimension`: the size of the vectors `vector_model` makes, if known."""
    fields = mapped_fields(mapping)
    problems = []

    def typed(name: str, role: str, types: tuple[str, ...]) -> MappedField | None:
        mapped = fields.get(name)
        if mapped is None:
            near = ", ".join(sorted(f.path for f in fields.values() if f.type in types)[:8])
            problems.append(
                f"{role} [{name}] is not in the index's mapping"
                + (f" (its {'/'.join(types)} fields: {near})" if near else "")
            )
            return None
        if mapped.type not in types:
            problems.append(f"{role} [{name}] is mapped as {mapped.type}, not {' or '.join(types)}")
            return None
        return mapped

    for name in field_map.text_fields:
        if (text := typed(name, "text field", TEXT_TYPES)) is not None and text.nested:
            problems.append(
                f"text field [{name}] is inside a nested object: searches reach it only "
                "through a nested query, which kgqr does not write"
            )
    shown = {"title field": field_map.title_field, "body field": field_map.body_field}
    for role, shown_name in shown.items():
        if shown_name:
            typed(shown_name, role, (*TEXT_TYPES, *KEYWORD_TYPES))
    for name in field_map.entity_fields:
        typed(name, "entity field", KEYWORD_TYPES)
    # Keys may be numbers (a catalogue number, a table's row id): ingest/document_keys.py
    # matches them as the engine does.
    for name in field_map.reference_fields:
        typed(name, "reference field", (*KEYWORD_TYPES, *NUMERIC_TYPES))
    if field_map.id_field:
        typed(field_map.id_field, "id field", (*KEYWORD_TYPES, *NUMERIC_TYPES))
    for name in field_map.side_vector_fields:
        typed(name, "embedded field", (*TEXT_TYPES, *KEYWORD_TYPES))
    if field_map.side_vector_fields and field_map.vector_field:
        problems.append(
            f"the index has vectors of its own [{field_map.vector_field}]: kgqr embeds only "
            "an index without any"
        )
    if field_map.vector_field:
        vector = typed(field_map.vector_field, "vector field", ("knn_vector",))
        if field_map.vector_model is None:
            problems.append(
                f"vector field [{field_map.vector_field}] needs the model that made its "
                "vectors (--model): kgqr embeds queries with it"
            )
        if vector is not None and vector.data_type != "float":
            problems.append(
                f"vector field [{field_map.vector_field}] holds {vector.data_type} vectors: "
                "kgqr's queries carry float vectors, which the engine refuses there"
            )
        held = vector.dimension if vector is not None else None
        if held is not None and model_dimension is not None and held != model_dimension:
            problems.append(
                f"vector field [{field_map.vector_field}] holds {held}-dimensional vectors, "
                f"and {field_map.vector_model} makes {model_dimension}-dimensional ones"
            )
    elif field_map.vector_model and not field_map.side_vector_fields:
        problems.append(f"--model {field_map.vector_model} is given without a vector field")
    if not field_map.text_fields and not any(f.type in TEXT_TYPES for f in fields.values()):
        problems.append("the index maps no text field: kgqr has no words to search")
    return problems + _unkept_in_source(field_map, mapping.get("_source") or {}, fields)


def _any_matched(paths: list[str], patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(path, pattern) for path in paths for pattern in patterns)


def _unkept_in_source(
    field_map: FieldMap, kept: Mapping[str, Any], fields: Mapping[str, MappedField]
) -> list[str]:
    """The map's fields whose values kgqr reads from `_source` (its graph's edges and
    vectors, and what each caller's fetch shows of them) that the index's `_source` does
    not keep: each found none, silently. (A title or body left out only leaves explains
    and LLM prompts without it.)"""
    keys = [field_map.id_field] if field_map.id_field else []
    read = [*field_map.entity_fields, *field_map.reference_fields,
            *field_map.side_vector_fields, *keys]  # fmt: skip
    if read and kept.get("enabled") is False:
        return [f"the index keeps no _source, where kgqr reads {', '.join(read)}"]
    includes, excludes = list(kept.get("includes") or []), list(kept.get("excludes") or [])
    problems = []
    for name in dict.fromkeys(read):
        # A pattern naming an object (`meta`) filters every field under it.
        within = source_paths([value_field(name, fields)])
        if _any_matched(within, excludes) or (includes and not _any_matched(within, includes)):
            problems.append(f"field [{name}] is left out of the index's _source: kgqr reads "
                            "documents' values there")  # fmt: skip
    return problems
