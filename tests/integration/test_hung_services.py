"""A service that hangs instead of refusing (SIGSTOP) degrades the rewrite, never the
search: every search answers within the rewrite budget plus its own search, the explain
names the stage, and once the service resumes (SIGCONT) rewrites work again without
restarting kgqr. Redis and the LLM here are this test's own; Neo4j is the shared one,
paused for a few seconds."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from kgqr_core.settings import Settings
from kgqr_ops.background_proxy import free_port, running_proxy
from kgqr_ops.services.neo4j_server import Neo4jServer
from kgqr_ops.services.process import port_is_open
from tests.integration.recording_llm import recording_llm

BUDGET_S = 3.0
# The hung side answers after 60 s, or never (the search's own timeout is 60 s): a search
# answered well under that did not wait for it, however busy the machine (a bound of the
# budget plus a few seconds measured the machine too).
WELL_UNDER_THE_HANG_S = 30.0
ENTITIES = '{"entities": [{"type": "movie", "name": "Heat", "document": "Heat: a crime film"}]}'
DOCUMENTS = '{"documents": ["A crime film about bank robbers and a detective."]}'


@contextmanager
def paused(pid: int) -> Iterator[None]:
    os.killpg(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(pid, signal.SIGCONT)


@contextmanager
def own_redis() -> Iterator[tuple[str, int]]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed: run `kgqr services up redis`")
    port = free_port()
    server = subprocess.Popen(
        [binary, "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while not port_is_open("127.0.0.1", port):
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/1", server.pid
    finally:
        server.kill()
        server.wait()


def _timed_search(url: str, index: str, strategy: str, text: str) -> tuple[float, dict[str, Any]]:
    body = {"query": {"match": {"text": f"{text} {uuid.uuid4().hex[:6]}"}}, "size": 3}
    started = time.perf_counter()
    response = httpx.post(f"{url}/{index}/_search", json=body, timeout=60,
                          params={"kgqr.strategy": strategy, "kgqr.explain": "true"})  # fmt: skip
    elapsed = time.perf_counter() - started
    assert response.status_code == 200, response.text
    assert response.json()["hits"]["hits"], "the search must still answer"
    return elapsed, dict(response.json()["kgqr"])


def test_a_hung_llm_costs_a_search_its_budget_only(settings: Settings, movies_kb: str) -> None:
    release = threading.Event()

    def hang(prompt: str) -> str:
        release.wait(timeout=60)
        return DOCUMENTS

    try:
        with recording_llm(hang) as (llm_url, _prompts):
            hung = settings.replaced({
                "llm_base_url": llm_url, "llm_model": f"hung-{uuid.uuid4().hex[:6]}",
                "rewrite_timeout_s": BUDGET_S, "llm_timeout_s": 60.0,
            })  # fmt: skip
            with running_proxy(hung) as url:
                elapsed, explain = _timed_search(url, movies_kb, "hyde", "bank robbers")
                assert explain["fallback"]["stage"] == "generate", explain["fallback"]
                assert elapsed < WELL_UNDER_THE_HANG_S, elapsed
                release.set()  # the LLM answers again: the next rewrite is a real one
                _, explain = _timed_search(url, movies_kb, "hyde", "bank robbers")
                assert explain["fallback"] is None and explain["expansions"]
    finally:
        release.set()


def test_a_client_that_gives_up_is_served_the_rewrite_it_left_when_it_retries(
    settings: Settings, movies_kb: str
) -> None:
    """A client whose timeout is shorter than an LLM call (opensearch-py's default is 10 s;
    a call takes 15-80 s on a CPU) gives up and retries. The rewrite it left runs on and
    the retry is served it, made once: a rewrite stopped when its client hung up was made
    afresh on every retry and never finished."""
    release = threading.Event()

    def first_call_held(prompt: str) -> str:
        if '"entities"' in prompt:
            release.wait(timeout=60)
            return ENTITIES
        return DOCUMENTS

    body = {"query": {"match": {"text": f"bank robbers {uuid.uuid4().hex[:6]}"}}, "size": 3}
    params = {"kgqr.strategy": "kar", "kgqr.explain": "true"}
    try:
        with recording_llm(first_call_held) as (llm_url, prompts):
            held = settings.replaced(
                {"llm_base_url": llm_url, "llm_model": f"held-{uuid.uuid4().hex[:6]}"}
            )
            with running_proxy(held) as url:
                search = f"{url}/{movies_kb}/_search"
                with pytest.raises(httpx.ReadTimeout):
                    httpx.post(search, json=body, params=params, timeout=3)
                release.set()
                retried = httpx.post(search, json=body, params=params, timeout=60)
    finally:
        release.set()
    assert retried.status_code == 200, retried.text
    explain = retried.json()["kgqr"]
    assert explain["fallback"] is None and explain["cached"] is True, explain
    assert len(prompts) == 2, prompts  # kar's two calls, once


def test_a_hung_cache_redis_is_a_miss_not_a_stalled_search(
    settings: Settings, movies_kb: str
) -> None:
    with own_redis() as (redis_url, pid):
        cached = settings.replaced({"cache_redis_url": redis_url})
        with running_proxy(cached) as url:
            _timed_search(url, movies_kb, "base", "bank robbers")
            with paused(pid):
                elapsed, explain = _timed_search(url, movies_kb, "base", "bank robbers")
            # The cache lookup gives up after KGQR_REDIS_TIMEOUT_S (and so does the write).
            assert elapsed < WELL_UNDER_THE_HANG_S, elapsed
            assert explain["fallback"] is None and explain["cached"] is False
            text = "police chase"  # resumed: cached again, without restarting kgqr
            body = {"query": {"match": {"text": text}}, "size": 3}
            params = {"kgqr.strategy": "base", "kgqr.explain": "true"}
            for _ in range(2):
                answer = httpx.post(f"{url}/{movies_kb}/_search", json=body, params=params)
            assert answer.json()["kgqr"]["cached"] is True


def test_a_hung_neo4j_falls_back_at_the_graph_stage_and_recovers(
    settings: Settings, movies_kb: str
) -> None:
    """Where the graph is read from Neo4j (no copy in OpenSearch, nor in memory); with the
    copy, a hung Neo4j is not on a search's path at all."""
    pid = Neo4jServer(settings).process.pid()
    if pid is None:
        pytest.fail("Neo4j was not started by `kgqr services up`, so it cannot be paused here")

    def script(prompt: str) -> str:
        return ENTITIES if '"entities"' in prompt else DOCUMENTS

    with recording_llm(script) as (llm_url, _prompts):
        graphy = settings.replaced({
            "llm_base_url": llm_url, "llm_model": f"stand-in-{uuid.uuid4().hex[:6]}",
            "rewrite_timeout_s": BUDGET_S, "graph_snapshot_max_relations": 0,
        })  # fmt: skip
        with running_proxy(graphy.replaced({"graph_projection_reads": False})) as url:
            with paused(pid):
                elapsed, explain = _timed_search(url, movies_kb, "kar", "Heat with Al Pacino")
            assert explain["fallback"]["stage"] == "propagate", explain["fallback"]
            assert elapsed < WELL_UNDER_THE_HANG_S, elapsed
            _, explain = _timed_search(url, movies_kb, "kar", "Heat with Al Pacino")
            assert explain["fallback"] is None and explain["details"]["neighbours"]
        with running_proxy(graphy) as url, paused(pid):
            elapsed, explain = _timed_search(url, movies_kb, "kar", "Heat with Al Pacino")
            assert explain["fallback"] is None and explain["details"]["neighbours"]
