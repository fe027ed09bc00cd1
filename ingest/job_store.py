"""Ingest job progress in Redis, shared by the CLI that enqueues and the workers that write.

A chunk counts once: its number joins the job's ``done`` set and its counts are added in
the same transaction, only if it was not there yet. So a chunk re-delivered after a
worker died, or re-sent by a re-run, never counts twice.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import redis

COUNTERS = ("documents", "relations", "mentions", "triples", "rejected", "vectors")
# How long a finished job's records are kept. A job still running has no expiry: a Redis
# bounded with `volatile-lru` (the local service's, to bound kgqr's caches) evicts keys
# that expire, and a queued job whose record went had its chunks set aside unwritten.
JOB_TTL_S = 30 * 24 * 3600


@dataclass(frozen=True)
class JobProgress:
    job_id: str
    kb: str
    source: str
    state: str  # "enqueuing", "enqueued", "done", "failed"
    chunks_total: int | None
    chunks_done: int
    counts: dict[str, int]
    created: float
    updated: float
    failed: dict[int, str] = field(default_factory=dict)  # chunk -> why it failed for good
    retrying: dict[int, str] = field(default_factory=dict)  # chunk -> why it is retried

    @property
    def finished(self) -> bool:
        """Every chunk either written or failed for good: nothing more will happen."""
        settled = self.chunks_done + len(self.failed)
        return self.chunks_total is not None and settled >= self.chunks_total

    @property
    def all_set_aside(self) -> bool:
        """Records were read and every one was set aside: a file in another format, or
        another encoding, whose job wrote nothing."""
        written = any(count for name, count in self.counts.items() if name != "rejected")
        return self.counts.get("rejected", 0) > 0 and not written

    @property
    def succeeded(self) -> bool:
        """Finished, no chunk failed for good, and something landed: what exits 0."""
        return self.finished and not self.failed and not self.all_set_aside


class JobStore:
    def __init__(self, redis: Any) -> None:
        self.redis = redis

    @staticmethod
    def key(job_id: str) -> str:
        return f"kgqr:job:{job_id}"

    def start(self, job_id: str, kb: str, source: str) -> None:
        """Create the job, or mark an existing one as being re-enqueued (keeps its counts)."""
        key, now = self.key(job_id), time.time()
        self.redis.hsetnx(key, "created", now)
        self.redis.hset(
            key, mapping={"kb": kb, "source": source, "state": "enqueuing", "updated": now}
        )
        self.redis.hdel(key, "chunks_total")
        self.redis.delete(key + ":failed", key + ":retrying")  # a re-run sends them again
        self.redis.persist(key)  # running again: kept until it is seen finished
        self.redis.persist(key + ":done")
        self.redis.persist(key + ":copies")
        self.redis.sadd("kgqr:jobs", job_id)

    def finish_enqueuing(self, job_id: str, chunks_total: int) -> bool:
        """False when the job is no longer on record (dropped while its chunks were being
        sent): nothing is recorded, which would make a record without its KB."""
        if not self.exists(job_id):
            return False
        self.redis.hset(
            self.key(job_id),
            mapping={"chunks_total": chunks_total, "state": "enqueued", "updated": time.time()},
        )
        return True

    def done_chunks(self, job_id: str) -> set[int]:
        return {int(chunk) for chunk in self.redis.smembers(self.key(job_id) + ":done")}

    def settled(self, job_id: str, chunks: set[int]) -> set[int]:
        """Those of `chunks` done or failed for good: one round trip for all of them."""
        key, ordered = self.key(job_id), sorted(chunks)
        with self.redis.pipeline(transaction=False) as pipe:
            for chunk in ordered:
                pipe.sismember(key + ":done", chunk)
                pipe.hexists(key + ":failed", chunk)
            answers = pipe.execute()
        return {chunk for i, chunk in enumerate(ordered) if answers[2 * i] or answers[2 * i + 1]}

    def exists(self, job_id: str) -> bool:
        return bool(self.redis.exists(self.key(job_id)))

    def is_done(self, job_id: str, chunk: int) -> bool:
        return bool(self.redis.sismember(self.key(job_id) + ":done", chunk))

    def complete_chunk(self, job_id: str, chunk: int, counts: dict[str, int]) -> bool:
        """Record a finished chunk; False when it had already been recorded, or its job is
        no longer on record (a drop forgot it: counting would make a record without its
        KB, which every later chunk of the job would take for a live one)."""
        key = self.key(job_id)
        done_key = key + ":done"
        with self.redis.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(done_key, key)
                    if not pipe.exists(key) or pipe.sismember(done_key, chunk):
                        pipe.reset()
                        return False
                    pipe.multi()
                    pipe.sadd(done_key, chunk)
                    pipe.hdel(key + ":copies", chunk)
                    pipe.hdel(key + ":failed", chunk)
                    pipe.hdel(key + ":retrying", chunk)
                    for name, value in counts.items():
                        pipe.hincrby(key, name, value)
                    pipe.hset(key, "updated", time.time())
                    pipe.execute()
                    return True
                except redis.WatchError:
                    continue  # another worker touched the set between WATCH and EXEC

    def copies_to_redo(
        self, job_id: str, chunk: int, retyped: set[str], losing: set[str]
    ) -> tuple[set[str], set[str]]:
        """`retyped` and `losing` (nodes read before a chunk's graph writes: retyped
        documents, nodes about to lose an edge) joined with what earlier attempts of the
        chunk read: once one attempt has written, a retry reads the graph changed already
        and finds neither, and the copies of those nodes' neighbours stayed stale. Kept in
        the job's `:copies` hash (no expiry while it runs, as its other keys), one field a
        chunk, gone with the chunk done or the job forgotten."""
        key, named = self.key(job_id), {f"r:{n}" for n in retyped} | {f"l:{n}" for n in losing}
        with self.redis.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key, key + ":copies", key + ":done")
                    # Forgotten (dropped), or done by another delivery meanwhile: nothing is
                    # kept (its field would outlive the job, with no expiry).
                    if not pipe.exists(key) or pipe.sismember(key + ":done", chunk):
                        pipe.reset()
                        break
                    held = pipe.hget(key + ":copies", chunk)
                    kept = set(json.loads(held)) if held else set()
                    if named <= kept:
                        pipe.reset()
                        named = kept
                        break
                    named |= kept
                    lasts = pipe.pttl(key)  # finished: a late delivery's field expires with it
                    pipe.multi()
                    pipe.hset(key + ":copies", chunk, json.dumps(sorted(named)))
                    if lasts > 0:
                        pipe.pexpire(key + ":copies", lasts)
                    pipe.execute()
                    break
                except redis.WatchError:
                    continue  # another attempt of the chunk (a re-delivery) wrote meanwhile
        return {m[2:] for m in named if m[0] == "r"}, {m[2:] for m in named if m[0] == "l"}

    def fail_chunk(self, job_id: str, chunk: int, reason: str) -> None:
        """Record a chunk that failed for good (retries spent, or an error no retry fixes),
        so the job can finish as failed instead of waiting for it forever."""
        key = self.key(job_id)
        if self.is_done(job_id, chunk) or not self.exists(job_id):
            return
        self.redis.hset(key + ":failed", chunk, reason[:500])
        self.redis.hdel(key + ":retrying", chunk)
        self.redis.hset(key, "updated", time.time())

    def note_retry(self, job_id: str, chunk: int, reason: str) -> None:
        """Say why a chunk is being retried (a store down, an index blocked), so a job that
        seems stuck tells the user what it waits for."""
        key = self.key(job_id)
        if not self.exists(job_id):
            return
        self.redis.hset(key + ":retrying", chunk, reason[:500])

    def progress(self, job_id: str) -> JobProgress | None:
        """One snapshot (MULTI/EXEC): read one by one, a chunk completing between the reads
        showed as done without its counts, and a finished job reported 0 documents."""
        key = self.key(job_id)
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(key)
            pipe.scard(key + ":done")
            pipe.hgetall(key + ":failed")
            pipe.hgetall(key + ":retrying")
            job, done_count, failed_raw, retrying_raw = pipe.execute()
        raw = {k.decode(): v.decode() for k, v in job.items()}
        if not raw:
            return None
        done = int(done_count)
        failed = {int(chunk): reason.decode() for chunk, reason in failed_raw.items()}
        retrying = {int(chunk): reason.decode() for chunk, reason in retrying_raw.items()}
        total = int(raw["chunks_total"]) if raw.get("chunks_total") else None
        state = raw["state"]
        if total is not None and done + len(failed) >= total:
            state = "failed" if failed else "done"
            self._keep_finished(key)
        return JobProgress(
            job_id=job_id,
            kb=raw["kb"],
            source=raw["source"],
            state=state,
            chunks_total=int(raw["chunks_total"]) if "chunks_total" in raw else None,
            chunks_done=done,
            counts={name: int(raw.get(name, 0)) for name in COUNTERS},
            created=float(raw["created"]),
            updated=float(raw["updated"]),
            failed=failed,
            retrying=retrying,
        )

    def _keep_finished(self, key: str) -> None:
        """A finished job's records expire JOB_TTL_S after it is first seen finished (by
        the CLI that follows it, `kgqr ingest jobs`, a status): a re-run makes them live."""
        with self.redis.pipeline(transaction=False) as pipe:
            for part in ("", ":done", ":failed", ":retrying", ":copies"):
                pipe.expire(key + part, JOB_TTL_S, nx=True)
            pipe.execute()

    def jobs_of(self, kb: str) -> list[JobProgress]:
        """The knowledge base's jobs, by the KB each records: a job id begins with its KB's
        name, but `movies-x-jsonl-...` begins with `movies-` too."""
        ids = sorted(j.decode() for j in self.redis.smembers("kgqr:jobs"))
        return [p for job_id in ids if (p := self.progress(job_id)) is not None and p.kb == kb]

    def unfinished(self, kb: str) -> list[str]:
        """The knowledge base's jobs that still have chunks to write."""
        return [progress.job_id for progress in self.jobs_of(kb) if not progress.finished]

    def others_of_stem(self, stem: str, job_id: str) -> list[str]:
        """The jobs whose id is `stem`, then `-` and a number other than `job_id`'s: the
        same source cut into chunks of another size; and `stem` alone, the id a job had
        before its chunk size was part of it."""
        ids = (j.decode() for j in self.redis.smembers("kgqr:jobs"))
        return sorted(j for j in ids if j != job_id and (j == stem or _cut_of(j, stem)))

    def forget(self, job_id: str) -> None:
        key = self.key(job_id)
        self.redis.delete(key, key + ":done", key + ":failed", key + ":retrying", key + ":copies")
        self.redis.srem("kgqr:jobs", job_id)


def _cut_of(job_id: str, stem: str) -> bool:
    """Whether `job_id` is `stem` cut at some chunk size (`stem-256`)."""
    head, _, size = job_id.rpartition("-")
    return head == stem and size.isdigit()
