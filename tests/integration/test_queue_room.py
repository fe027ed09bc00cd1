"""A job's chunks wait for room in the broker: at most `limit` sent and not settled.

Against the real Redis that holds job progress; the sends are recorded, not queued (the
ingest tests run the whole path)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ingest.job_store import JobStore
from ingest.queue_room import AtWork, QueueRoom, StoppedWaiting

pytestmark = pytest.mark.quick
RUNNING = frozenset({"task-1"})  # what a worker reports of the job
NOTHING = AtWork(frozenset(), 0)


@pytest.fixture
def job(redis_client: Any) -> Iterator[tuple[JobStore, str]]:
    jobs, job_id = JobStore(redis_client), f"room-{uuid.uuid4().hex[:8]}"
    jobs.start(job_id, "room", "test")
    yield jobs, job_id
    jobs.forget(job_id)


def _sending(room: QueueRoom, job_id: str, chunks: int) -> tuple[list[int], threading.Thread]:
    sent: list[int] = []
    send = room.bounded(lambda _job, chunk, _records, _extract: sent.append(chunk))
    thread = threading.Thread(target=lambda: [send(job_id, n, [], False) for n in range(chunks)],
                              daemon=True)  # fmt: skip
    thread.start()
    return sent, thread


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_chunk_is_sent_only_when_one_of_the_last_limit_has_settled(
    job: tuple[JobStore, str],
) -> None:
    """Sent all at once, a source lay whole in Redis: larger than its memory, it failed
    on an OOM halfway."""
    jobs, job_id = job
    room = QueueRoom(jobs, 2, none_consuming=lambda: False, at_work=lambda _job: AtWork(RUNNING, 0),
                     poll_s=0.01)  # fmt: skip
    sent, thread = _sending(room, job_id, 5)
    _until(lambda: len(sent) == 2, "the first two were not sent")
    time.sleep(0.3)
    assert sent == [0, 1]
    jobs.complete_chunk(job_id, 0, {"documents": 1})
    _until(lambda: len(sent) == 3, "a done chunk made no room")
    time.sleep(0.3)
    assert sent == [0, 1, 2]
    jobs.fail_chunk(job_id, 1, "a record no retry fixes")  # failed for good settles too
    _until(lambda: len(sent) == 4, "a failed chunk made no room")
    jobs.complete_chunk(job_id, 2, {"documents": 1})
    thread.join(10)
    assert sent == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("case", ["no worker", "queued", "slow", "idle", "stuck"])
def test_after_a_stall_it_sends_on_only_past_chunks_taken_for_lost(
    job: tuple[JobStore, str], case: str
) -> None:
    """With no worker, it keeps waiting and says so once; so it does while the job's
    chunks are at work (queued behind others; running slowly, an LLM's extraction):
    sending on then let the queue grow by `limit` every stall. With workers and nothing at
    work (lost in a broker restart), or only a task reported running past `stuck_s` (a
    worker whose broker went away reports its chunk running forever), the chunks are taken
    for lost: re-sent once every chunk is sent, waiting on them waited forever."""
    jobs, job_id = job
    said: list[str] = []
    asked = iter(range(1_000_000))

    def at_work(_job: str) -> AtWork:
        next(asked)
        running = RUNNING if case in ("slow", "stuck") else frozenset()
        return AtWork(running, 3 if case == "queued" else 0)

    room = QueueRoom(jobs, 1, none_consuming=lambda: case == "no worker", at_work=at_work,
                     say=said.append, poll_s=0.01, stall_s=0.05,
                     stuck_s=0.12 if case == "stuck" else 60)  # fmt: skip
    sent, thread = _sending(room, job_id, 2)
    time.sleep(0.6)
    assert said[0].startswith(f"job {job_id}: 1 chunks queued, the rest are sent as workers")
    if case in ("idle", "stuck"):
        assert sent == [0, 1] and len(said) == 2
        assert "none is at work: sending on (the lost are re-sent" in said[1]
        asked_then = next(asked)  # idle: at the first stall; stuck: once past stuck_s
        assert asked_then == 1 if case == "idle" else asked_then >= 3
        return
    assert sent == [0]
    if case == "no worker":
        assert said[1:] == [f"1 chunks of job {job_id} wait for a worker: the rest are sent "
                            "as one takes them (kgqr ingest worker)"]  # fmt: skip
    else:
        assert said[1:] == []
    jobs.complete_chunk(job_id, 0, {})
    thread.join(10)
    assert sent == [0, 1]


def test_a_chunk_backing_off_to_retry_is_at_work(job: tuple[JobStore, str]) -> None:
    """Its retry note changes at each retry; one that stays as it was is a stale note."""
    jobs, job_id = job
    room = QueueRoom(jobs, 1, none_consuming=lambda: False, at_work=lambda _job: NOTHING)
    jobs.note_retry(job_id, 0, "retry 1 in 1s: OpenSearch is unavailable")
    assert not room._lost(job_id)
    jobs.note_retry(job_id, 0, "retry 2 in 2s: OpenSearch is unavailable")
    assert not room._lost(job_id)
    assert room._lost(job_id)  # the same note two stalls running


def test_its_deadline_and_a_drop_end_the_wait(job: tuple[JobStore, str]) -> None:
    jobs, job_id = job
    late = QueueRoom(jobs, 1, none_consuming=lambda: True, at_work=lambda _job: NOTHING,
                     poll_s=0.01, deadline=time.monotonic() + 0.1)  # fmt: skip
    send = late.bounded(lambda *_: None)
    send(job_id, 0, [], False)
    with pytest.raises(StoppedWaiting) as stopped:
        send(job_id, 1, [], False)
    assert stopped.value.job_id == job_id
    room = QueueRoom(jobs, 1, none_consuming=lambda: True, at_work=lambda _job: NOTHING,
                     poll_s=0.01)  # fmt: skip
    sent, thread = _sending(room, job_id, 2)
    _until(lambda: len(sent) == 1, "the first was not sent")
    jobs.forget(job_id)  # `kgqr ingest drop`: its chunks are set aside by the worker
    thread.join(10)
    assert not thread.is_alive()


def test_a_broker_that_refuses_a_chunk_a_moment_is_waited_out(job: tuple[JobStore, str]) -> None:
    """Sending lasts as long as the job now: a Redis restart meanwhile ended the command."""
    import redis

    jobs, job_id = job
    said: list[str] = []
    refusals = iter([redis.exceptions.ConnectionError("Connection refused")])
    sent: list[int] = []

    def send(_job: str, chunk: int, _records: list, _extract: bool) -> None:
        if (refusal := next(refusals, None)) is not None:
            raise refusal
        sent.append(chunk)

    room = QueueRoom(jobs, 4, none_consuming=lambda: False, at_work=lambda _job: AtWork(RUNNING, 0),
                     say=said.append, poll_s=0.01)  # fmt: skip
    room.bounded(send)(job_id, 0, [], False)
    assert sent == [0]
    assert said == ["the broker did not take a chunk (Connection refused): trying again"]
