"""Re-embedding a knowledge base with another model while it keeps answering searches.

Clients and the proxy address a knowledge base by its index names (``kgqr-KB-documents``,
``kgqr-KB-triples``). Re-embedding copies each index, with new vectors, into a versioned
index (``kgqr-KB-documents-g2``) made with the new model's dimension, while searches keep
reading the old one; then one ``_aliases`` call turns each name into an alias of its new
index and deletes the old index, for both indices at once, so no search sees a half-swap.
Progress (a cursor per index) lives in Redis: running the same command again resumes.
Ingest into the knowledge base is refused while a re-embed runs, since the copy would
miss what it writes; the copy is checked document for document before the swap.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ingest.bulk_requests import bulk_results
from ingest.job_store import JobStore
from ingest.write_leases import WriteLeases
from kgqr_core.embedder import Embedder
from kgqr_core.embedder_models import document_revision
from plugin import installer, kb_meta, schema

COPY_BATCH = 64
# Between moving a name to its new index and deleting the old one: longer than a search
# that started on the old index takes.
OLD_INDEX_GRACE_S = 5.0


def embedded(role: str, source: dict[str, Any]) -> tuple[str, str]:
    """The title and text ingest embedded for a stored document or triple. A document
    stored before kgqr kept its body apart has only its combined text, title included."""
    if role == "triples":
        return "", source.get("ttr") or ""
    if "body" in source:
        return source.get("title") or "", source["body"] or ""
    return "", source.get("text") or ""


class ReembedError(RuntimeError):
    """The knowledge base cannot be re-embedded now (missing, busy, or a copy mismatch)."""


def state_key(kb: str) -> str:
    return f"kgqr:reembed:{kb}"


def in_progress(redis: Any, kb: str) -> str | None:
    """The model a running re-embed of `kb` writes, or None (ingest checks this)."""
    raw = redis.hget(state_key(kb), "model")
    return raw.decode() if raw is not None else None


def concrete_index(client: Any, name: str) -> str | None:
    """The index `name` stands for: itself, or the one index its alias points at."""
    indices = list(client.indices.get(index=name, ignore_unavailable=True))
    if not indices:
        return None
    if len(indices) != 1:
        raise ReembedError(f"{name} points at {len(indices)} indices: {indices}")
    return str(indices[0])


def next_generation(name: str, current: str) -> str:
    """``kgqr-KB-documents`` (an index of older kgqr) or ``…-g1`` -> ``…-g2``; ``…-g2`` ->
    ``…-g3``."""
    return schema.generation_index(name, (schema.generation_of(name, current) or 1) + 1)


@dataclass
class IndexCopy:
    """One index being copied: the name clients use, where from, where to, how far."""

    role: str  # "documents" or "triples"
    name: str
    source: str
    target: str
    cursor: str | None = None
    copied: int = 0


@dataclass
class ReembedPlan:
    kb: str
    model: str
    dimension: int
    copies: list[IndexCopy] = field(default_factory=list)

    def to_redis(self) -> dict[str, str]:
        return {"model": self.model, "dimension": str(self.dimension), **self.copies_state()}

    def copies_state(self) -> dict[str, str]:
        """How far each copy is, as kept in Redis (saved again after every batch)."""
        return {"copies": json.dumps([vars(copy) for copy in self.copies])}

    @classmethod
    def from_redis(cls, kb: str, raw: dict[bytes, bytes]) -> ReembedPlan:
        values = {key.decode(): value.decode() for key, value in raw.items()}
        copies = [IndexCopy(**copy) for copy in json.loads(values["copies"])]
        return cls(kb, values["model"], int(values["dimension"]), copies)


@dataclass(frozen=True)
class Progress:
    role: str
    copied: int
    total: int


def plan(
    opensearch: Any,
    redis: Any,
    meta: kb_meta.KnowledgeBaseMeta,
    model: str,
    dimension: int,
    restart: bool = False,
) -> ReembedPlan:
    """Resume the re-embed recorded for the knowledge base, or start one: create the
    target indices with `dimension` and record where each copy starts."""
    kb = meta.kb
    raw = redis.hgetall(state_key(kb))
    if raw and not restart:
        resumed = ReembedPlan.from_redis(kb, raw)
        if resumed.model != model:
            raise ReembedError(
                f"a re-embed of {kb!r} to {resumed.model} is unfinished: run it again with "
                f"--model {resumed.model}, or pass --restart to drop it"
            )
        return resumed
    if raw:
        abandon(opensearch, redis, ReembedPlan.from_redis(kb, raw))
    if meta.embedder == model and meta.document_revision == document_revision(model):
        raise ReembedError(f"knowledge base {kb!r} already holds vectors of {model}")
    started = ReembedPlan(kb, model, dimension)
    for role, name in (("documents", schema.documents_index(kb)),
                       ("triples", schema.triples_index(kb))):  # fmt: skip
        current = concrete_index(opensearch, name)
        if current is None:
            continue
        target = next_generation(name, current)
        if opensearch.indices.exists(index=target):
            opensearch.indices.delete(index=target)  # left by an abandoned run
        # Laid out as the generation it replaces: the template's one shard and 0-1
        # replicas made a KB of three shards and a replica one without its replica.
        body = schema.kb_index_body(role, dimension)
        opensearch.indices.create(
            index=target,
            body=installer.laid_out(body, *installer.index_layout(opensearch, current)),
        )
        started.copies.append(IndexCopy(role, name, current, target))
    if not started.copies:
        raise ReembedError(f"knowledge base {kb!r} has no documents index")
    # No expiry: a Redis bounded with volatile-lru evicts keys that expire, and a re-embed
    # whose plan went could be neither resumed nor told apart from none (ingest wrote on).
    # The swap and an abandon delete it.
    redis.hset(state_key(kb), mapping=started.to_redis())
    return started


def _pages(opensearch: Any, copy: IndexCopy, batch: int) -> Iterator[list[dict[str, Any]]]:
    """The source's documents in id order from the cursor on, vectors left out."""
    while True:
        body: dict[str, Any] = {
            "size": batch,
            "sort": [{"id": "asc"}],
            "query": {"match_all": {}},
            "_source": {"excludes": ["vector"]},
        }
        if copy.cursor is not None:
            body["search_after"] = [copy.cursor]
        hits = opensearch.search(index=copy.source, body=body)["hits"]["hits"]
        if not hits:
            return
        yield hits


def copy_index(
    opensearch: Any,
    redis: Any,
    plan_: ReembedPlan,
    copy: IndexCopy,
    embedder: Embedder,
    on_progress: Callable[[Progress], None],
    batch: int = COPY_BATCH,
) -> None:
    """Copy one index with new vectors, saving the cursor after every batch."""
    total = int(opensearch.count(index=copy.source)["count"])
    on_progress(Progress(copy.role, copy.copied, total))
    for hits in _pages(opensearch, copy, batch):
        titles, texts = zip(*(embedded(copy.role, hit["_source"]) for hit in hits), strict=True)
        vectors = embedder.encode(texts, titles)
        operations = [
            ({"index": {"_index": copy.target, "_id": hit["_id"]}},
             {**hit["_source"], "vector": vector.tolist()})
            for hit, vector in zip(hits, vectors, strict=True)
        ]  # fmt: skip
        with _still_on_record(redis, plan_.kb):
            results = bulk_results(opensearch, operations)
            errors = [item["error"] for item in results if "error" in item]
            if errors:
                raise ReembedError(f"{copy.target} refused {len(errors)} documents: {errors[:3]}")
            copy.cursor, copy.copied = hits[-1]["sort"][0], copy.copied + len(hits)
            redis.hset(state_key(plan_.kb), mapping=plan_.copies_state())
        on_progress(Progress(copy.role, copy.copied, total))


@contextlib.contextmanager
def _still_on_record(redis: Any, kb: str) -> Iterator[None]:
    """A write of the re-embed, under a write lease on its state (ingest.write_leases),
    as an ingest's chunk writes under its job's: a drop deletes that state first and waits
    for the lease, so the re-embed stops at its next write instead of making the dropped
    KB's indices, or its kgqr-meta record, again."""
    with WriteLeases(redis).writing(state_key(kb), kb, f"reembed-{os.getpid()}") as held:
        if not held:
            raise ReembedError(f"knowledge base {kb!r} was dropped during the re-embed")
        yield


def check_copies(opensearch: Any, plan_: ReembedPlan) -> None:
    """Every document of each source is in its target, by id, before anything is swapped."""
    for copy in plan_.copies:
        opensearch.indices.refresh(index=[copy.source, copy.target])
        counts = [int(opensearch.count(index=i)["count"]) for i in (copy.source, copy.target)]
        if counts[0] != counts[1]:
            raise ReembedError(
                f"{copy.target} holds {counts[1]} documents and {copy.source} {counts[0]}: "
                "was something written during the copy? Run again with --restart"
            )


def swap(
    opensearch: Any,
    redis: Any,
    plan_: ReembedPlan,
    done: bool = False,
    grace_s: float = OLD_INDEX_GRACE_S,
) -> None:
    """Point every name at its new index in one atomic call (`done`: that call already
    went through) and record the new model, so the proxy embeds queries with it; delete
    the old indices after `grace_s`, when searches that started on them have finished.
    An index of the KB's own name (made by kgqr before versioned indices) can only leave
    in the same call that makes its name an alias: a search in flight on it then fails."""
    actions: list[dict[str, Any]] = []
    for copy in plan_.copies:
        actions.append({"add": {"index": copy.target, "alias": copy.name}})
        if copy.source == copy.name:
            actions.append({"remove_index": {"index": copy.source}})
        else:
            actions.append({"remove": {"index": copy.source, "alias": copy.name}})
    with _still_on_record(redis, plan_.kb):
        if not done:
            opensearch.indices.update_aliases(body={"actions": actions})
        kb_meta.record(
            opensearch,
            plan_.kb,
            {
                "embedder": plan_.model,
                "dimension": plan_.dimension,
                "document_revision": document_revision(plan_.model),
            },
        )
    time.sleep(grace_s)
    for copy in plan_.copies:
        if copy.source != copy.name:
            opensearch.indices.delete(index=copy.source, ignore_unavailable=True)
    redis.delete(state_key(plan_.kb))


def reembed(
    opensearch: Any,
    redis: Any,
    kb: str,
    embedder: Embedder,
    dimension: int,
    on_progress: Callable[[Progress], None],
    restart: bool = False,
    batch: int = COPY_BATCH,
) -> ReembedPlan:
    """The whole re-embed: plan (or resume), copy what is left, check, swap."""
    busy = JobStore(redis).unfinished(kb)
    if busy:
        raise ReembedError(
            f"ingest jobs of {kb!r} are unfinished ({', '.join(busy)}): let them finish "
            "(kgqr ingest status JOB) before re-embedding, or forget one whose source has "
            "changed since and will not be resumed (kgqr ingest forget JOB)"
        )
    meta = kb_meta.load(opensearch, kb)  # checks the name too
    if meta is None:
        raise ReembedError(f"no knowledge base {kb!r} (nothing in {schema.META_INDEX})")
    plan_ = plan(opensearch, redis, meta, embedder.model_name, dimension, restart)
    swapped = [opensearch.indices.exists_alias(name=c.name, index=c.target) for c in plan_.copies]
    if not all(swapped):  # else a run stopped between the swap and forgetting its state
        for copy in plan_.copies:
            copy_index(opensearch, redis, plan_, copy, embedder, on_progress, batch)
        check_copies(opensearch, plan_)
    swap(opensearch, redis, plan_, done=all(swapped))
    return plan_


def abandon(opensearch: Any, redis: Any, plan_: ReembedPlan) -> None:
    """Drop an unfinished re-embed: its target indices, and its state."""
    for copy in plan_.copies:
        if opensearch.indices.exists(index=copy.target) and not opensearch.indices.exists_alias(
            name=copy.name, index=copy.target
        ):
            opensearch.indices.delete(index=copy.target)
    redis.delete(state_key(plan_.kb))
