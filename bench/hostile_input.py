"""Hostile input: what one caller's crafted searches cost kgqr, and every other caller.

1. Planning cost per byte (in this process, as the proxy plans): a single-token
   query_string of 1 KB, 64 KB and 1 MB. Goal: 1 MB costs at most 2x per byte what 64 KB
   costs (before the fix, 64 KB cost 3,764x per byte what 1 KB did; linear is 1x).
2. A plain search's latency through kgqr (its own process) with no other traffic, then
   while ten hostile clients keep requests in flight: 4 KB query_string words with every
   syntax pattern, 1 MB single words, 100-item msearches of them, and the same without
   credentials. Goal: loaded p50 at most 1.5x the unloaded p50 measured in this run.

Run: python -m bench.hostile_input (with `kgqr services up`).
"""

from __future__ import annotations

import argparse
import json
import ssl
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_common import proxy_process, save
from kgqr_core.settings import get_settings
from kgqr_ops.services.secured_opensearch import SecuredOpenSearchNode
from query_rewriter.proxy.request_body import json_object
from query_rewriter.search.plan import plan_search, uri_search_as_body

INDEX = "kgqr-bench-hostile-plain"  # an ordinary index: its searches are read and planned
PLAIN = {"query": {"match": {"text": "bank robbers in los angeles"}}, "size": 5}


def query_string(text: str) -> bytes:
    return json.dumps({"query": {"query_string": {"query": text}}}).encode()


def planning_seconds(raw: bytes, repeats: int = 5) -> float:
    """The fastest of a few plans of `raw`, as app.handle_search plans it (less its I/O)."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        payload = json_object(raw, "request body")
        params, body = uri_search_as_body({}, payload)
        plan_search("kgqr-movies-documents", params, body, "graph")
        best = min(best, time.perf_counter() - started)
    return best


def planning_costs() -> dict[str, Any]:
    sizes = {"1KB": 1024, "64KB": 64 * 1024, "1MB": 1024 * 1024}
    per_byte = {
        name: planning_seconds(query_string("a:" * (n // 2))) / n for name, n in sizes.items()
    }
    return {
        "ns_per_byte": {name: round(cost * 1e9, 2) for name, cost in per_byte.items()},
        "ratio_64KB_over_1KB": round(per_byte["64KB"] / per_byte["1KB"], 2),
        "ratio_1MB_over_64KB": round(per_byte["1MB"] / per_byte["64KB"], 2),
        "goal_ratio_1MB_over_64KB": 2.0,
        "before_fix_ratio_64KB_over_1KB": 3764,
    }


def hostile_requests(url: str) -> list[Callable[[httpx.Client], httpx.Response]]:
    # Sent without credentials: on a secured cluster each is refused (401) by the engine.
    """One of each kind of crafted request, each a call that sends it."""
    words = ["x" * 4096, "x:" * 2048, "x?" * 2048, "x~" * 2048, "x\\" * 2048]
    big = query_string("y" * 1024 * 1024)
    item = query_string("z:" * 2048).decode()
    msearch = "".join(f'{{"index": "{INDEX}"}}\n{item}\n' for _ in range(100)).encode()
    json_type = {"content-type": "application/json"}
    ndjson = {"content-type": "application/x-ndjson"}

    def search(body: bytes) -> Callable[[httpx.Client], httpx.Response]:
        return lambda client: client.post(f"{url}/{INDEX}/_search", content=body, headers=json_type)

    calls = [search(query_string(word)) for word in words]
    calls.append(search(big))
    calls.append(lambda c: c.post(f"{url}/_msearch", content=msearch, headers=ndjson))
    return calls


FAILED: dict[str, int] = {}  # plain searches that did not answer 200, by status


def latencies_ms(client: httpx.Client, url: str, count: int) -> list[float]:
    """`count` plain searches one after the other (as the client's own user, if any)."""
    timings = []
    for _ in range(count):
        started = time.perf_counter()
        status = client.post(f"{url}/{INDEX}/_search", json=PLAIN).status_code
        timings.append((time.perf_counter() - started) * 1000)
        if status != 200:
            FAILED[str(status)] = FAILED.get(str(status), 0) + 1
    return timings


def summary(timings: list[float]) -> dict[str, float]:
    ordered = sorted(timings)
    return {
        "p50_ms": round(statistics.median(ordered), 2),
        "p99_ms": round(ordered[int(0.99 * (len(ordered) - 1))], 2),
    }


@dataclass(frozen=True)
class Caller:
    """How the plain searches are sent: their user's headers, and how TLS is checked."""

    headers: dict[str, str] = field(default_factory=dict)
    verify: ssl.SSLContext | bool = True

    def client(self) -> httpx.Client:
        return httpx.Client(timeout=120, headers=self.headers, verify=self.verify)


def under_load(
    url: str, count: int, hostile_clients: int, plain: Caller
) -> tuple[list[float], int]:
    """Plain-search latencies while `hostile_clients` threads keep crafted requests in
    flight; and how many crafted requests were answered meanwhile."""
    stop = threading.Event()
    sent = [0]
    calls = hostile_requests(url)

    def attack(offset: int) -> None:
        with httpx.Client(timeout=120, verify=plain.verify) as client:  # no credentials
            n = offset
            while not stop.is_set():
                calls[n % len(calls)](client)
                sent[0] += 1
                n += 1

    threads = [
        threading.Thread(target=attack, args=(i,), daemon=True) for i in range(hostile_clients)
    ]
    for thread in threads:
        thread.start()
    time.sleep(2.0)  # every attacker has a request in flight
    try:
        with plain.client() as client:
            timings = latencies_ms(client, url, count)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    return timings, sent[0]


def phase(url: str, searches: int, hostile_clients: int, plain: Caller) -> dict[str, Any]:
    """Plain-search latency at `url` alone, then with the hostile clients sending there."""
    with plain.client() as client:
        latencies_ms(client, url, 20)  # warm connections and caches
        unloaded = latencies_ms(client, url, searches)
    FAILED.clear()
    loaded, answered = under_load(url, searches, hostile_clients, plain)
    time.sleep(10)  # the engine drains what the attack left queued before the next phase
    return {
        "unloaded": summary(unloaded),
        "with_hostile_in_flight": summary(loaded),
        "plain_searches_failed_under_load": dict(FAILED),
        "hostile_requests_answered": answered,
        "p50_ratio": round(statistics.median(loaded) / statistics.median(unloaded), 2),
    }


def secured_phases(searches: int, hostile_clients: int) -> dict[str, Any]:
    """The same crafted requests without credentials on the secured node, directly and
    through kgqr: the engine refuses each in milliseconds, so what the plain searches lose
    through kgqr beyond that is kgqr's own cost."""
    settings = get_settings()
    node = SecuredOpenSearchNode(settings)
    if not node.is_healthy():
        return {"skipped": "no secured node: run `kgqr services up opensearch-secured`"}
    secured = node.credentials()
    trusting = ssl.create_default_context(cafile=str(secured.ca_file))
    plain = Caller({"authorization": secured.admin_authorization}, trusting)
    with httpx.Client(
        base_url=secured.url, timeout=60, headers=plain.headers, verify=trusting
    ) as engine:
        _fill(engine)
        try:
            direct = phase(secured.url, searches, hostile_clients, plain)
            env = {
                "KGQR_OPENSEARCH_URL": secured.url,
                "KGQR_OPENSEARCH_USER": "kgqr",
                "KGQR_OPENSEARCH_PASSWORD": secured.kgqr_password,
                "KGQR_OPENSEARCH_CA_CERTS": str(secured.ca_file),
            }
            with proxy_process(env) as proxy:
                through_kgqr = phase(proxy.url, searches, hostile_clients, plain)
        finally:
            engine.delete(INDEX)
    return _compared(direct, through_kgqr)


def open_phases(searches: int, hostile_clients: int) -> dict[str, Any]:
    """The crafted requests on the node without security, which runs every one of them."""
    settings = get_settings()
    with httpx.Client(base_url=settings.opensearch.url, timeout=60) as engine:
        _fill(engine)
        try:
            direct = phase(settings.opensearch.url, searches, hostile_clients, Caller())
            with proxy_process() as proxy:
                through_kgqr = phase(proxy.url, searches, hostile_clients, Caller())
        finally:
            engine.delete(INDEX)
    return _compared(direct, through_kgqr)


def _fill(engine: httpx.Client) -> None:
    engine.delete(INDEX)
    lines = []
    for n, text in enumerate(["bank robbers in los angeles", "a cab driver", "tobacco"]):
        lines += [json.dumps({"index": {"_id": str(n)}}), json.dumps({"text": text})]
    ndjson = {"content-type": "application/x-ndjson"}
    body = "\n".join(lines) + "\n"
    answer = engine.post(f"{INDEX}/_bulk", params={"refresh": "true"}, content=body, headers=ndjson)
    answer.raise_for_status()


def _compared(direct: dict[str, Any], through_kgqr: dict[str, Any]) -> dict[str, Any]:
    return {
        "direct": direct,
        "through_kgqr": through_kgqr,
        "kgqr_p50_ratio_over_direct_p50_ratio": round(
            through_kgqr["p50_ratio"] / direct["p50_ratio"], 2
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--searches", type=int, default=200, help="plain searches per phase")
    parser.add_argument("--hostile-clients", type=int, default=10)
    args = parser.parse_args()
    planning = planning_costs()
    print("planning per byte:", planning)
    figures = {
        "planning": planning,
        "hostile_clients": args.hostile_clients,
        "goal_p50_ratio": 1.5,
        "unauthenticated_on_secured_node": secured_phases(args.searches, args.hostile_clients),
        "authenticated_on_open_node": open_phases(args.searches, args.hostile_clients),
    }
    print(json.dumps(figures, indent=2))
    save("hostile_input", figures)


if __name__ == "__main__":
    main()
