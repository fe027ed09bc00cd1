"""Write leases against a real Redis: what a drop waits for, and what it does not."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ingest.job_store import JobStore
from ingest.kb_removal import drop_knowledge_base
from ingest.write_leases import WriteLeases


@pytest.fixture
def job(redis_client: Any, kb_name: str) -> Iterator[str]:
    jobs = JobStore(redis_client)
    job_id = f"{kb_name}-jsonl-0"
    jobs.start(job_id, kb_name, "jsonl:test")
    yield jobs.key(job_id)
    jobs.forget(job_id)
    redis_client.delete(f"kgqr:writing:{kb_name}")


def test_a_chunk_of_a_forgotten_job_gets_no_lease(
    redis_client: Any, kb_name: str, job: str
) -> None:
    leases = WriteLeases(redis_client)
    redis_client.delete(job)
    with leases.writing(job, kb_name, "task-1") as held:
        assert held is False
        assert leases.live(kb_name) == []


def test_a_drop_waits_for_a_live_lease_and_not_for_a_lapsed_one(
    redis_client: Any, kb_name: str, job: str
) -> None:
    leases = WriteLeases(redis_client, lease_s=0.3)
    # A worker killed mid-chunk: its lease was never renewed, and has lapsed.
    redis_client.zadd(f"kgqr:writing:{kb_name}", {"dead-task": time.time() - 1})
    assert leases.wait_until_none(kb_name, pytest.fail, timeout_s=5) == []
    released = threading.Event()
    said: list[str] = []

    def chunk() -> None:
        with leases.writing(job, kb_name, "task-2") as held:
            assert held
            released.wait(5)

    writer = threading.Thread(target=chunk)
    writer.start()
    try:
        while "task-2" not in leases.live(kb_name):
            time.sleep(0.01)
        # Past three lease lengths: renewed, the lease is still live.
        assert leases.wait_until_none(kb_name, said.append, timeout_s=1.0) == ["task-2"]
        assert said and "1 chunks" in said[0]
        threading.Timer(0.3, released.set).start()
        started = time.monotonic()
        assert leases.wait_until_none(kb_name, said.append, timeout_s=5) == []
        assert time.monotonic() - started >= 0.2
    finally:
        released.set()
        writer.join()
    assert leases.live(kb_name) == []


def test_a_kbs_leases_cannot_be_evicted_and_lapsed_ones_go_as_the_next_is_taken(
    opensearch: Any, neo4j_driver: Any, redis_client: Any, kb_name: str, job: str
) -> None:
    """The local Redis evicts keys that expire (volatile-lru): leases that could expire
    could be evicted, and a drop then went on while a chunk still wrote."""
    key = f"kgqr:writing:{kb_name}"
    # A killed worker's, long lapsed; and one lapsed just now, whose renewal is late (or
    # whose worker's clock is behind): removed, it could never be renewed again.
    redis_client.zadd(key, {"dead-task": time.time() - 60, "late-task": time.time() - 0.5})
    redis_client.expire(key, 60)  # as an older kgqr left it
    leases = WriteLeases(redis_client, lease_s=1.0)  # pruned 5 s after they lapse
    with leases.writing(job, kb_name, "task-4") as held:
        assert held
        time.sleep(0.6)  # a renewal or two
        assert redis_client.ttl(key) == -1
        assert sorted(redis_client.zrange(key, 0, -1)) == [b"late-task", b"task-4"]
    # A drop removes those lapsed long ago too, and so the set once none is left.
    redis_client.zadd(key, {"dead-again": time.time() - 600})  # past the drop's 100 s
    drop_knowledge_base(opensearch, neo4j_driver, redis_client, kb_name, settle_s=0)
    assert redis_client.zrange(key, 0, -1) == [b"late-task"]
    redis_client.zrem(key, "late-task")
    assert redis_client.exists(key) == 0


def test_a_redelivered_task_clears_the_lease_its_dead_run_left(
    redis_client: Any, kb_name: str, job: str
) -> None:
    leases = WriteLeases(redis_client)
    redis_client.zadd(f"kgqr:writing:{kb_name}", {"task-3": time.time() + 60})
    redis_client.delete(job)  # the drop forgot the job meanwhile
    with leases.writing(job, kb_name, "task-3") as held:
        assert held is False
    assert leases.live(kb_name) == []


def test_an_ingest_started_during_a_drops_wait_is_forgotten_and_waited_for(
    opensearch: Any, neo4j_driver: Any, redis_client: Any, kb_name: str, job: str
) -> None:
    """The drop waits on a chunk of the first ingest; a second ingest of the KB begins
    meanwhile and one of its chunks starts writing. The drop waits for that chunk too,
    and forgets the second job, so none of its queued chunks writes after the drop."""
    jobs, leases = JobStore(redis_client), WriteLeases(redis_client)
    second = f"{kb_name}-jsonl-1"
    waiting, first_done, second_done = threading.Event(), threading.Event(), threading.Event()
    ended: list[float] = []

    def chunk(job_key: str, token: str, done: threading.Event) -> None:
        with leases.writing(job_key, kb_name, token) as held:
            assert held
            done.wait(10)

    first = threading.Thread(target=chunk, args=(job, "task-a", first_done))
    first.start()
    while "task-a" not in leases.live(kb_name):
        time.sleep(0.01)

    def drop() -> None:
        drop_knowledge_base(opensearch, neo4j_driver, redis_client, kb_name,
                            say=lambda _line: waiting.set(), settle_s=10)  # fmt: skip
        ended.append(time.monotonic())

    dropper = threading.Thread(target=drop)
    dropper.start()
    try:
        assert waiting.wait(5)
        jobs.start(second, kb_name, "jsonl:test")  # the second ingest, after the forget
        late = threading.Thread(target=chunk, args=(jobs.key(second), "task-b", second_done))
        late.start()
        while "task-b" not in leases.live(kb_name):
            time.sleep(0.01)
        first_done.set()
        first.join()
        time.sleep(0.3)
        assert not ended  # still waiting, for the second ingest's chunk
        second_done.set()
        late.join()
        dropper.join(10)
        assert ended
        assert not jobs.exists(second)
        with leases.writing(jobs.key(second), kb_name, "task-c") as held:
            assert held is False  # a queued chunk of the second ingest writes nothing
    finally:
        first_done.set()
        second_done.set()
        jobs.forget(second)
