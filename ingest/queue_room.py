"""Sending a job's chunks only as fast as workers take them.

Sent all at once, a source lay whole in the broker: a source larger than Redis's memory
failed mid-send on an OOM (the local Redis's 512 MB hold no more), and every job queued
behind it waited for all of it. A job now has at most `limit` chunks sent and not yet
settled (done, or failed for good); the next waits for one of them.

A chunk can be lost in the broker (a broker restart), and then never settles. After
`stall_s` with none settling, while workers run, the unsettled ones are taken for lost
when nothing of the job is at work: none queued, none running but for half an hour (a
worker whose broker went away mid-chunk reports that chunk running forever), no retry
noted but one unchanged since the last stall. Sending goes on, and the stall re-send that
follows a job once all its chunks are sent brings them back. With no worker taking the
queue, it keeps waiting, and says so. A broker restarting meanwhile is waited out, as
`job_runner.follow` waits it out, for a while.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from ingest.job_store import JobProgress, JobStore
from ingest.transient_errors import BROKER_ERRORS

# job id, chunk number, records, extract triples: what job_runner's `send` takes
Send = Callable[[str, int, list, bool], None]


class StoppedWaiting(TimeoutError):
    """The command's own deadline (`--timeout`) passed while chunks waited for room."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id} stopped waiting for room in the queue")
        self.job_id = job_id


class AtWork(NamedTuple):
    running: frozenset[str]  # the job's chunk tasks workers report running
    queued: int  # messages in the job's queue (its own, or others' ahead of them)


@dataclass
class _SeenAtWork:
    running: dict[str, float] = field(default_factory=dict)  # task -> first seen running
    notes: frozenset[tuple[int, str]] | None = None  # retry notes at the last stall


@dataclass
class QueueRoom:
    jobs: JobStore
    limit: int
    # Asked after a stall: no worker takes the job's queue.
    none_consuming: Callable[[], bool]
    # Asked after a stall: what of the job (by id) is at work.
    at_work: Callable[[str], AtWork]
    on_wait: Callable[[JobProgress], None] = lambda _progress: None
    say: Callable[[str], None] = print
    deadline: float | None = None  # time.monotonic() after which waiting stops
    poll_s: float = 0.1  # a full room waits at most this past a chunk settling
    stall_s: float = 120.0
    # A task reported running this long is a worker's that lost its broker mid-chunk (it
    # reports that chunk running forever), not a slow one (an LLM reading a chunk).
    stuck_s: float = 1_800.0
    _said: set[str] = field(default_factory=set, init=False)
    _seen: dict[str, _SeenAtWork] = field(default_factory=dict, init=False)

    def bounded(self, send: Send) -> Send:
        """`send`, waiting before each chunk while `limit` of this send's are unsettled."""
        held: set[int] = set()

        def bounded_send(job_id: str, chunk: int, records: list, extract: bool) -> None:
            self._wait_for_room(job_id, held)
            self._waiting_out_the_broker(lambda: send(job_id, chunk, records, extract))
            held.add(chunk)

        return bounded_send

    def _wait_for_room(self, job_id: str, held: set[int]) -> None:
        moved, told = time.monotonic(), False
        while len(held) >= self.limit:
            if settled := self._settled(job_id, held):
                held -= settled
                moved = time.monotonic()
                self._seen.pop(job_id, None)  # what was at work moved
                continue
            if job_id not in self._said:  # once a job: the job line comes after sending
                self.say(f"job {job_id}: {len(held)} chunks queued, the rest are sent as "
                         f"workers take them (kgqr ingest status {job_id})")  # fmt: skip
                self._said.add(job_id)
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise StoppedWaiting(job_id)
            if time.monotonic() - moved > self.stall_s:
                moved = time.monotonic()
                if self.none_consuming():
                    if not told:
                        self.say(f"{len(held)} chunks of job {job_id} wait for a worker: "
                                 "the rest are sent as one takes them "
                                 "(kgqr ingest worker)")  # fmt: skip
                        told = True
                elif self._lost(job_id):
                    self.say(f"no chunk of job {job_id} settled in {self.stall_s:g}s, and "
                             "none is at work: sending on (the lost are re-sent once all "
                             "are sent)")  # fmt: skip
                    held.clear()
                    return
            time.sleep(self.poll_s)

    def _settled(self, job_id: str, held: set[int]) -> set[int]:
        """Those of `held` settled, all of them once the job is forgotten (dropped: a worker
        sets its chunks aside, and the next send says why); none while Redis is away."""
        try:
            if (progress := self.jobs.progress(job_id)) is None:  # its record is gone
                return set(held)
            self.on_wait(progress)
            return self.jobs.settled(job_id, held)
        except BROKER_ERRORS:
            return set()

    def _lost(self, job_id: str) -> bool:
        """None of the job's chunks queued, none running but for longer than `stuck_s`,
        and no retry noted but one as it was at the last stall (a retry's note changes at
        each: one that stays is a stale note, its retry lost with the broker)."""
        try:
            progress = self.jobs.progress(job_id)
            work = self.at_work(job_id)
        except BROKER_ERRORS:
            return False
        now, seen = time.monotonic(), self._seen.setdefault(job_id, _SeenAtWork())
        notes = frozenset((progress.retrying if progress is not None else {}).items())
        seen.running = {task: seen.running.get(task, now) for task in work.running}
        stale_notes, seen.notes = notes == seen.notes, notes
        stuck = all(now - since >= self.stuck_s for since in seen.running.values())
        return not work.queued and stuck and (not notes or stale_notes)

    def _waiting_out_the_broker(self, send: Callable[[], None]) -> None:
        """A broker that refuses for longer than five stalls is not restarting (a password
        changed, a certificate expired): its error is the command's."""
        told, given_up = False, time.monotonic() + 5 * self.stall_s
        while True:
            try:
                send()
                return
            except BROKER_ERRORS as exc:
                if time.monotonic() > min(given_up, self.deadline or given_up):
                    raise
                if not told:
                    self.say(f"the broker did not take a chunk ({exc}): trying again")
                    told = True
                time.sleep(max(self.poll_s, 1.0))
