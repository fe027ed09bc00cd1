"""What kgqr knows about each knowledge base besides its documents: the document
structure prompts describe, and the embedder its vectors came from. Stored as one
document per knowledge base in the ``kgqr-meta`` index."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from plugin import installer
from plugin.field_map import KEEPS_UNKNOWN_FIELDS, FieldMap
from plugin.schema import META_INDEX, check_kb_name


class DocumentStructure(BaseModel):
    """The types of a knowledge base and their fields (KAR Table 9), for prompts."""

    model_config = KEEPS_UNKNOWN_FIELDS

    types: dict[str, list[str]] = Field(default_factory=dict)
    relations: list[str] = Field(default_factory=list)

    def merge(self, other: DocumentStructure) -> DocumentStructure:
        types = {name: list(fields) for name, fields in self.types.items()}
        for name, fields in other.types.items():
            known = types.setdefault(name, [])
            known.extend(field for field in fields if field not in known)
        relations = list(dict.fromkeys([*self.relations, *other.relations]))
        kept = {**(self.model_extra or {}), **(other.model_extra or {})}  # a newer kgqr's
        return DocumentStructure(types=types, relations=relations, **kept)

    def describe(self) -> str:
        """The structure as prompt text: one line per type with its fields."""
        lines = [f"- {name}: {', '.join(fields) or 'text'}" for name, fields in self.types.items()]
        if self.relations:
            lines.append(f"Relations: {', '.join(self.relations)}")
        return "\n".join(lines)


class KbDefault(BaseModel):
    """One version of a knowledge base's default: the strategy and parameters a search
    that names none gets, who set it, why, and the evidence behind it (`kgqr tune auto`'s
    cross-validated comparison to base; none for a default set by hand)."""

    model_config = KEEPS_UNKNOWN_FIELDS

    version: int
    strategy: str | None  # None: cleared, the proxy's own default serves the KB again
    params: dict[str, float] = Field(default_factory=dict)
    reason: str
    set_by: str
    set_at: str
    evidence: dict[str, Any] | None = None
    # A rollback's: the version it repeats, so a second rollback goes on to the one before
    # that version, not back to the version the first rolled back from.
    restores: int | None = None
    # The model of the vectors the KB held when it was set (None: set before kgqr kept
    # it). What beats base depends on them (the global default differs by model): a
    # default chosen on MiniLM's may not hold once `kgqr ingest reembed` gives it Gemma's.
    embedder: str | None = None

    def other_vectors(self, now: str) -> str | None:
        """What to tell of a default set on another model's vectors than the KB's `now`."""
        if self.embedder is None or self.embedder == now:
            return None
        return (f"v{self.version} was set when the KB held {self.embedder}'s vectors, and it "
                f"holds {now}'s now: run `kgqr tune auto` again, or `kgqr kb set-default "
                "--clear` for the proxy's default")  # fmt: skip

    def describe(self) -> str:
        params = " ".join(f"{name}={value:g}" for name, value in sorted(self.params.items()))
        chosen = self.strategy or "none (the proxy's default)"
        return f"v{self.version}: {chosen}{' ' + params if params else ''} ({self.reason})"


def set_by(tool: str, user: str | None) -> str:
    """Who set a default: the tool, and the OpenSearch user it wrote as where known (the
    record is a default's audit trail: the tool alone told no one who changed it)."""
    return f"{tool}, as {user}" if user else tool


class MetaUnreadable(Exception):
    """kgqr-meta (or a KB's index, for one it does not record) answered neither the KB's
    record nor that it has none: what the KB's searches need (its model, its field map)
    is unknown."""


class KnowledgeBaseMeta(BaseModel):
    model_config = KEEPS_UNKNOWN_FIELDS

    kb: str
    structure: DocumentStructure
    embedder: str
    dimension: int
    # The embedder's document form its vectors were made in (embedder_models.py); meta
    # written before forms were versioned holds the first.
    document_revision: int = 1
    # The agent strategy's optimised plan templates (`kgqr agent optimize`), as JSON text:
    # plans hold values of any type, which a mapped object field would fix at first sight.
    agent_plans: str | None = None
    # An index the team attached (`kgqr kb attach`): its field map; None for a knowledge
    # base kgqr ingested into its own indices.
    attached: FieldMap | None = None
    # An attached index's sync checkpoints: "index/shard" -> the highest _seq_no synced.
    synced: dict[str, int] | None = None
    # ... and the uuid of the index they number (None where the account may not read it).
    synced_uuid: str | None = None
    # Every version of the KB's default strategy, oldest first; the last one is served.
    defaults: list[KbDefault] = Field(default_factory=list)

    @property
    def default(self) -> KbDefault | None:
        """The version served: the last, unless it cleared the KB's default."""
        current = self.defaults[-1] if self.defaults else None
        return current if current is not None and current.strategy is not None else None

    def fields(self) -> FieldMap:
        """Where this knowledge base's documents keep their words and vectors."""
        if self.attached is not None:
            return self.attached
        return FieldMap.own(self.kb, self.embedder, self.dimension)


def load(client: Any, kb: str) -> KnowledgeBaseMeta | None:
    if not client.exists(index=META_INDEX, id=check_kb_name(kb)):
        return None
    return KnowledgeBaseMeta.model_validate(client.get(index=META_INDEX, id=kb)["_source"])


# Writes of a record that another writer changed meanwhile, tried again at most this often.
CONFLICT_RETRIES = 5


class KnowledgeBaseGone(LookupError):
    """The knowledge base's record went (a drop or a detach) while a job wrote to it."""


def record(
    client: Any,
    kb: str,
    changes: dict[str, Any],
    create: KnowledgeBaseMeta | None = None,
) -> KnowledgeBaseMeta:
    """Write `changes` (field: value; a `structure` merges into the stored one, and so
    does an `attached` given as a dict of the field map's fields) over kb's record as it is
    now, and only those: a job records what it did at its end, and the
    whole record it had read at its start, written back, undid what landed meanwhile (a
    rollback of the default, a narrower field map, a detach, which it made again). Each
    write is over the version it read, retried on a conflict. `create`: the record of a
    knowledge base that has none yet; without it, a record that went is not made again."""
    from opensearchpy.exceptions import ConflictError, NotFoundError

    for _ in range(CONFLICT_RETRIES):
        try:
            found = client.get(index=META_INDEX, id=check_kb_name(kb))
        except NotFoundError:
            if create is None:
                raise KnowledgeBaseGone(
                    f"{kb!r} is no longer recorded in {META_INDEX} (dropped or detached "
                    "meanwhile): nothing of this job's was recorded"
                ) from None
            meta, written_over = create.model_copy(update=changes), {"op_type": "create"}
        else:
            meta = KnowledgeBaseMeta.model_validate(found["_source"])
            if "structure" in changes:
                changes = {**changes, "structure": meta.structure.merge(changes["structure"])}
            if isinstance(changes.get("attached"), dict) and meta.attached is not None:
                merged = meta.attached.model_copy(update=changes["attached"])
                changes = {**changes, "attached": merged}
            meta = meta.model_copy(update=changes)
            written_over = {
                "if_seq_no": found["_seq_no"],
                "if_primary_term": found["_primary_term"],
            }
        body = {**meta.model_dump(), "updated": dt.datetime.now(dt.UTC).isoformat()}
        try:
            client.index(index=META_INDEX, id=kb, body=body, refresh=True, **written_over)
        except ConflictError:
            continue  # written meanwhile: apply the changes to what landed
        return meta
    raise RuntimeError(f"{kb!r}'s record kept changing; try again")


class NoSuchDefault(LookupError):
    """A rollback to a version the knowledge base never had, or a KB with nothing to roll
    back to."""


def next_default(
    meta: KnowledgeBaseMeta,
    strategy: str | None,
    params: dict[str, float],
    reason: str,
    set_by: str,
    evidence: dict[str, Any] | None = None,
    restores: int | None = None,
) -> tuple[KbDefault, dict[str, Any]]:
    """The KB's next default version, and the partial update of its kgqr-meta document
    that records it (earlier versions stay, for a rollback and for the record)."""
    now = dt.datetime.now(dt.UTC)
    chosen = KbDefault(
        version=len(meta.defaults) + 1, strategy=strategy, params=params, reason=reason,
        set_by=set_by, set_at=now.isoformat(timespec="seconds"), evidence=evidence,
        restores=restores, embedder=meta.embedder,
    )  # fmt: skip
    history = [d.model_dump() for d in [*meta.defaults, chosen]]
    return chosen, {"doc": {"defaults": history, "updated": now.isoformat()}}


def set_default(
    client: Any,
    kb: str,
    strategy: str | None,
    params: dict[str, float],
    reason: str,
    set_by: str,
    evidence: dict[str, Any] | None = None,
) -> KbDefault:
    """Record a new version of the KB's default (its meta must exist). Written only over
    the meta it was numbered from: two set at once both land, as consecutive versions."""
    chosen = DefaultChoice(strategy, params, reason, evidence)
    return _record_default(client, kb, lambda _meta: chosen, set_by)


class UnusableDefault(ValueError):
    """A rollback to a version this kgqr cannot run (its proxy would serve its own
    default in its place)."""


def roll_back_default(
    client: Any,
    kb: str,
    to_version: int | None,
    set_by: str,
    problem_of: Callable[[KbDefault], str | None] = lambda _: None,
) -> KbDefault:
    """A new version that repeats an earlier one: a rollback is recorded, not a rewrite of
    history. By default the one before the current, or, where the current is a rollback,
    the one before the version it repeats: rollbacks one after another step back through
    the history, as undo does. The current version is the one the rollback is written
    over: read before another landed, it was the one rolled back from. `problem_of`: why
    this kgqr could not serve a version, refused (UnusableDefault) rather than recorded."""

    def earlier_of(meta: KnowledgeBaseMeta) -> DefaultChoice:
        if not meta.defaults:
            raise NoSuchDefault(f"{kb!r} has no default to roll back")
        by_version = {d.version: d for d in meta.defaults}
        current = meta.defaults[-1]
        standing_for = by_version.get(current.restores or 0, current)
        wanted = standing_for.version - 1 if to_version is None else to_version
        if wanted not in by_version:
            if to_version is None:
                raise NoSuchDefault(f"{kb!r}'s default stands for v{standing_for.version}, "
                                    "its first: nothing earlier to roll back to")  # fmt: skip
            known = ", ".join(f"v{d.version}" for d in meta.defaults)
            raise NoSuchDefault(f"{kb!r} has no default v{wanted} (it has {known})")
        original = by_version.get(by_version[wanted].restores or 0, by_version[wanted])
        if (problem := problem_of(original)) is not None:
            raise UnusableDefault(f"{kb!r}'s default v{original.version} is not one this "
                                  f"kgqr runs ({problem}): not rolled back to")  # fmt: skip
        return DefaultChoice(original.strategy, original.params,
                             f"rollback to v{original.version} ({original.reason})",
                             original.evidence, restores=original.version)  # fmt: skip

    return _record_default(client, kb, earlier_of, set_by)


@dataclass(frozen=True)
class DefaultChoice:
    strategy: str | None
    params: dict[str, float]
    reason: str
    evidence: dict[str, Any] | None
    restores: int | None = None


def _record_default(
    client: Any, kb: str, choose: Callable[[KnowledgeBaseMeta], DefaultChoice], set_by: str
) -> KbDefault:
    """The version `choose` makes of the KB's meta as it is, written over that meta only,
    retried on a conflict."""
    from opensearchpy.exceptions import ConflictError

    installer.install_meta_index(client)  # a kgqr-meta older than defaults maps them
    for _ in range(CONFLICT_RETRIES):
        if not client.exists(index=META_INDEX, id=check_kb_name(kb)):
            raise NoSuchDefault(f"no knowledge base {kb!r} (`kgqr kb list` shows them)")
        found = client.get(index=META_INDEX, id=kb)
        meta = KnowledgeBaseMeta.model_validate(found["_source"])
        choice = choose(meta)
        chosen, update = next_default(meta, choice.strategy, choice.params, choice.reason,
                                      set_by, choice.evidence, choice.restores)  # fmt: skip
        numbered_from = {"if_seq_no": found["_seq_no"], "if_primary_term": found["_primary_term"]}
        try:
            client.update(index=META_INDEX, id=kb, body=update, refresh=True, **numbered_from)
        except ConflictError:
            continue  # another version landed first: number this one after it
        return chosen
    raise NoSuchDefault(f"{kb!r}'s record kept changing; try again")


def clear_agent_plans(client: Any, kb: str) -> bool:
    """Drop the KB's agent plans (the `agent` strategy then serves `base`); False if it
    had none."""
    meta = load(client, kb)
    if meta is None or meta.agent_plans is None:
        return False
    body = {"doc": {"agent_plans": None, "updated": dt.datetime.now(dt.UTC).isoformat()}}
    client.update(index=META_INDEX, id=kb, body=body, refresh=True)
    return True
