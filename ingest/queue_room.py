"""Sending a job's chunks only as fast as workers take them.

Sent all at once, a source lay whole in the broker: a source larger than Redis's memory
failed mid-send on an OOM (the local Redis's 512 MB hold no more), and every job queued
behind it waited for all of it. A job now has at most `limit` chunks sent and not yet
settled (done, or failed for good); the next waits for one of them.

A chunk can be lost in the broker (a broker restart), and then never settles: after
`stall_s` with none settling, sending goes on, and the lost ones are re-sent by the stall
re-send that follows a job once all its chunks are sent (`job_runner.resender`). With no
worker taking the queue at all, it keeps waiting, and says so once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ingest.job_store import JobProgress, JobStore

# job id, chunk number, records, extract triples: what job_runner's `send` takes
Send = Callable[[str, int, list, bool], None]


class StoppedWaiting(TimeoutError):
    """The command's own deadline (`--timeout`) passed while chunks waited for room."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id} stopped waiting for room in the queue")
        self.job_id = job_id


@dataclass
class QueueRoom:
    jobs: JobStore
    limit: int
    # Asked after a stall: True when no worker takes the job's queue.
    none_consuming: Callable[[], bool]
    on_wait: Callable[[JobProgress], None] = lambda _progress: None
    say: Callable[[str], None] = print
    deadline: float | None = None  # time.monotonic() after which waiting stops
    poll_s: float = 0.5
    stall_s: float = 120.0

    def bounded(self, send: Send) -> Send:
        """`send`, waiting before each chunk while `limit` of this send's are unsettled."""
        held: set[int] = set()

        def bounded_send(job_id: str, chunk: int, records: list, extract: bool) -> None:
            self._wait_for_room(job_id, held)
            send(job_id, chunk, records, extract)
            held.add(chunk)

        return bounded_send

    def _wait_for_room(self, job_id: str, held: set[int]) -> None:
        moved, told = time.monotonic(), False
        while len(held) >= self.limit:
            if settled := self.jobs.settled(job_id, held):
                held -= settled
                moved = time.monotonic()
                continue
            if not self.jobs.exists(job_id):
                return  # dropped: a worker sets the chunk aside, the next send says why
            if (progress := self.jobs.progress(job_id)) is not None:
                self.on_wait(progress)
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise StoppedWaiting(job_id)
            if time.monotonic() - moved > self.stall_s:
                if not self.none_consuming():
                    self.say(f"no chunk of job {job_id} settled in {self.stall_s:g}s: "
                             "sending on (chunks lost are re-sent once all are sent)")  # fmt: skip
                    held.clear()
                    return
                if not told:
                    self.say(f"{len(held)} chunks of job {job_id} wait for a worker: the "
                             "rest are sent as one takes them (kgqr ingest worker)")  # fmt: skip
                    told = True
                moved = time.monotonic()
            time.sleep(self.poll_s)
