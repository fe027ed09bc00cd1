"""A soak with faults: mixed searches through the front for MINUTES while ingest jobs run,
with one OpenSearch node killed and restarted, Neo4j restarted, Redis restarted and the
LLM hung for a minute on the way. Loopback only; stops by itself.

    python -m bench.soak [--minutes 30 --rates pass=10,base=3,graph=3,llm=0.2]

The cluster is the soak's own (three nodes on ports of their own, removed afterwards);
Neo4j, Redis and the LLM are the ones `kgqr services up` runs, restarted in place. The
searches are open-loop at fixed rates, well under the knees `bench/load_steps.py`
measured (base ~90/s, graph ~80/s, pass-through ~1000/s on one node without ingest):
the machine's 2 cores also carry three nodes, an ingest job that embeds as fast as it can
(its worker at nice 10, below the searches, as a machine that serves searches should run
it) and the LLM's first answers. `llm` is hyde with a 1 s budget over ten repeated
questions, as a team's frequent queries are. A first try at twice these rates, with the
worker at normal priority, queued every class for seconds: that is the overload the
proxy's admission control answers with fallbacks, not a soak.

Per minute it prints and saves, for each class, the count, p50 and p99, the outcomes that
were not plain answers (fallbacks by stage, HTTP errors, client errors), and the proxy's and
the worker's memory, open files and sockets. At the end:
- searches that failed outside a fault's window (the fault and 10 s after);
- ingest jobs whose counts did not match between OpenSearch and Neo4j;
- the memory at the end against minute 5.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.bench_common import proxy_process, save
from bench.load_steps import process_tree, process_tree_rss_mb
from bench.proxy_latency import percentile
from kgqr_core.settings import Settings
from kgqr_ops.services.llm_server import LlmServer
from kgqr_ops.services.neo4j_server import Neo4jServer
from kgqr_ops.services.redis_server import RedisServer
from kgqr_ops.services.scratch_cluster import kill, scratch_cluster
from plugin import schema
from query_rewriter.search.service import FALLBACK_HEADER

HTTP_PORT, EXTRA_HTTP_BASE, TRANSPORT_BASE = 9471, 9480, 9571
SEARCH_KB = "soak-search"
PLAIN_INDEX = "soak-plain"
GRACE_S = 10.0


@dataclass
class Record:
    """What the soak saw, shared by its threads (appends only)."""

    searches: list[tuple[float, str, float, str]] = field(default_factory=list)
    samples: list[dict[str, float]] = field(default_factory=list)
    faults: list[dict[str, Any]] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)


KGQR = [sys.executable, "-c", "from kgqr_ops.cli import main; main()"]


def kgqr(
    env: dict[str, str], *args: str, timeout_s: float = 1800
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KGQR, *args], env=env, capture_output=True, text=True,
                          timeout=timeout_s)  # fmt: skip


def generated_catalog(folder: Path, documents: int, seed: int) -> Path:
    made = kgqr(dict(os.environ), "ingest", "generate", "catalog", str(folder),
                "--documents", str(documents), "--seed", str(seed))  # fmt: skip
    made.check_returncode()
    return folder


def questions_from(folder: Path, count: int) -> list[str]:
    titles = []
    with (folder / "documents.jsonl").open() as lines:
        for line in itertools.islice(lines, count):
            titles.append(json.loads(line)["title"])
    return titles


def fd_counts(pid: int) -> tuple[int, int]:
    """(open files, of which sockets) of `pid` and its children."""
    files = sockets = 0
    for current in process_tree(pid):
        try:
            for entry in os.scandir(f"/proc/{current}/fd"):
                files += 1
                sockets += os.readlink(entry.path).startswith("socket:")
        except OSError:
            continue
    return files, sockets


def sample_forever(record: Record, started: float, proxy_pid: int, worker_pid: int,
                   stop: threading.Event) -> None:  # fmt: skip
    while not stop.wait(5):
        files, sockets = fd_counts(proxy_pid)
        record.samples.append({
            "t": time.monotonic() - started,
            "proxy_rss_mb": process_tree_rss_mb(proxy_pid),
            "worker_rss_mb": process_tree_rss_mb(worker_pid),
            "proxy_fds": files, "proxy_sockets": sockets,
        })  # fmt: skip


def run_faults(record: Record, started: float, minutes: float, nodes: list[Any],
               settings: Settings, stop: threading.Event) -> None:  # fmt: skip
    """Each fault at its share of the run; its window is from the fault until the service
    answers again."""

    def at(share: float) -> bool:
        return not stop.wait(max(0.0, started + share * minutes * 60 - time.monotonic()))

    def window(name: str, act: Any) -> None:
        begun = time.monotonic() - started
        print(f"  fault: {name} at {begun:.0f}s", flush=True)
        act()
        record.faults.append({"fault": name, "start_s": begun, "end_s": time.monotonic() - started})

    def node_1() -> None:
        kill(nodes[0])
        time.sleep(60)
        nodes[0].up()

    def restart(service: Any) -> None:
        service.down()
        service.up()

    def hang_llm() -> None:
        pid = LlmServer(settings).process.pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(60)
        finally:
            os.kill(pid, signal.SIGCONT)

    plan = [(0.20, "OpenSearch node 1 killed, restarted after 60 s", node_1),
            (0.40, "Neo4j restarted", lambda: restart(Neo4jServer(settings))),
            (0.55, "Redis restarted", lambda: restart(RedisServer(settings))),
            (0.70, "LLM hung for 60 s", hang_llm)]  # fmt: skip
    for share, name, act in plan:
        if not at(share):
            return
        window(name, act)


def ingest_forever(record: Record, env: dict[str, str], scratch: Path, documents: int,
                   started: float, stop: threading.Event) -> None:  # fmt: skip
    """Jobs one after another, each verified (counts in OpenSearch and Neo4j) and dropped.
    A job whose command dies in a fault is run again: the same command resumes it."""
    for number in itertools.count(1):
        if stop.is_set():
            return
        kb = f"soak-ingest-{number}"
        source = generated_catalog(scratch / kb, documents, seed=number)
        begun = time.monotonic()
        attempts = 0
        while not stop.is_set():
            attempts += 1
            if kgqr(env, "ingest", "run", f"jsonl:{source}", "--kb", kb).returncode == 0:
                break
            time.sleep(5)
        else:
            return
        verified = kgqr(env, "ingest", "verify", "--kb", kb)
        record.jobs.append({
            "kb": kb, "attempts": attempts, "seconds": round(time.monotonic() - begun, 1),
            "at_s": round(time.monotonic() - started), "counts_match": verified.returncode == 0,
            "verify": verified.stdout[-600:],
        })  # fmt: skip
        print(f"  ingest {kb}: {'counts match' if verified.returncode == 0 else 'MISMATCH'} "
              f"after {attempts} attempt(s)", flush=True)  # fmt: skip
        kgqr(env, "ingest", "drop", "--kb", kb, "--yes")


async def load(front: str, rates: dict[str, float], questions: list[str], seconds: float,
               record: Record, started: float) -> None:  # fmt: skip
    index = schema.documents_index(SEARCH_KB)
    counter = itertools.count()

    def request_for(kind: str, n: int) -> tuple[str, dict[str, str], dict[str, Any]]:
        text = questions[n % len(questions)]
        if kind == "pass":
            return f"/{PLAIN_INDEX}/_search", {}, {"query": {"match": {"text": text}}}
        if kind == "llm":  # ten questions again and again: cached after their first time
            return (f"/{index}/_search", {"kgqr.strategy": "hyde"},
                    {"query": {"match": {"text": questions[n % 10]}}})  # fmt: skip
        return (f"/{index}/_search", {"kgqr.strategy": kind},
                {"query": {"match": {"text": f"{text} ({n})"}}})  # fmt: skip

    async def one(client: httpx.AsyncClient, kind: str) -> None:
        path, params, body = request_for(kind, next(counter))
        sent = time.monotonic()
        try:
            response = await client.post(path, params=params, json=body)
            if response.status_code >= 400:
                outcome = f"http {response.status_code}"
            elif FALLBACK_HEADER in response.headers:
                outcome = f"fallback {response.headers[FALLBACK_HEADER]}"
            else:
                outcome = "ok"
        except httpx.HTTPError as exc:
            outcome = f"client {type(exc).__name__}"
        record.searches.append((sent - started, kind, (time.monotonic() - sent) * 1000, outcome))

    async def stream(client: httpx.AsyncClient, kind: str, rate: float) -> None:
        pending: set[asyncio.Task[None]] = set()
        deadline = time.monotonic() + seconds
        next_at = time.monotonic()
        while next_at < deadline:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            task = asyncio.create_task(one(client, kind))
            pending.add(task)
            task.add_done_callback(pending.discard)
            next_at += 1 / rate
        await asyncio.gather(*pending)

    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(base_url=front, timeout=60, limits=limits) as client:
        await asyncio.gather(*(stream(client, kind, rate) for kind, rate in rates.items() if rate))


def per_minute(record: Record) -> list[dict[str, Any]]:
    minutes: dict[int, dict[str, Any]] = collections.defaultdict(dict)
    grouped: dict[tuple[int, str], list[tuple[float, str]]] = collections.defaultdict(list)
    for at, kind, ms, outcome in record.searches:
        grouped[(int(at // 60), kind)].append((ms, outcome))
    for (minute, kind), rows in sorted(grouped.items()):
        times = [ms for ms, _ in rows]
        others = collections.Counter(outcome for _, outcome in rows if outcome != "ok")
        minutes[minute][kind] = {"n": len(rows), "p50_ms": round(percentile(times, 0.5), 1),
                                 "p99_ms": round(percentile(times, 0.99), 1),
                                 "not_ok": dict(others)}  # fmt: skip
    for sample in record.samples:
        row = minutes[int(sample["t"] // 60)]
        for key in ("proxy_rss_mb", "worker_rss_mb", "proxy_fds", "proxy_sockets"):
            row[key] = round(max(row.get(key, 0), sample[key]))
    return [{"minute": m + 1, **minutes[m]} for m in sorted(minutes)]


def failed_outside_faults(record: Record) -> list[tuple[float, str, str]]:
    windows = [(f["start_s"], f["end_s"] + GRACE_S) for f in record.faults]
    return [
        (round(at, 1), kind, outcome)
        for at, kind, _, outcome in record.searches
        if outcome.startswith(("http 5", "client")) and not any(a <= at <= b for a, b in windows)
    ]


def print_minutes(rows: list[dict[str, Any]], kinds: list[str]) -> None:
    for row in rows:
        parts = [f"min {row['minute']:>2}"]
        for kind in kinds:
            figures = row.get(kind)
            if figures:
                bad = sum(figures["not_ok"].values())
                parts.append(f"{kind} {figures['n']:>4} p50 {figures['p50_ms']:>6.0f} "
                             f"p99 {figures['p99_ms']:>6.0f} !{bad:<3}")  # fmt: skip
        memory = f"{row.get('proxy_rss_mb', 0)}/{row.get('worker_rss_mb', 0)} MB"
        parts.append(f"rss {memory} fds {row.get('proxy_fds', 0)} "
                     f"sockets {row.get('proxy_sockets', 0)}")  # fmt: skip
        print("  ".join(parts), flush=True)


def memory_growth(rows: list[dict[str, Any]], key: str) -> float | None:
    """Memory at the end over memory in minute 5 (the goal: at most 1.10)."""
    at_five = next((r[key] for r in rows if r["minute"] == 5 and key in r), None)
    last = next((r[key] for r in reversed(rows) if key in r), None)
    return round(last / at_five, 3) if at_five and last else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--rates", default="pass=10,base=3,graph=3,llm=0.2",
                        help="searches per second of each class")  # fmt: skip
    parser.add_argument("--search-documents", type=int, default=5000)
    parser.add_argument("--job-documents", type=int, default=2000)
    args = parser.parse_args()
    rates = {k: float(v) for k, v in (pair.split("=") for pair in args.rates.split(","))}
    settings = Settings()
    others = ",".join(f"http://127.0.0.1:{EXTRA_HTTP_BASE + i}" for i in (2, 3))
    env = {
        **os.environ,
        "KGQR_OPENSEARCH_URL": f"http://127.0.0.1:{HTTP_PORT}",
        "KGQR_OPENSEARCH_OTHER_URLS": others,
        "KGQR_KB_SHARDS": "3",
        "KGQR_INGEST_QUEUE": f"kgqr-soak-{uuid.uuid4().hex[:8]}",
        "KGQR_REWRITE_BUDGET_MS": "1000",
        "KGQR_REWRITE_BUDGET_STRATEGY": "graph",
    }
    record = Record()
    ports = (HTTP_PORT, EXTRA_HTTP_BASE, TRANSPORT_BASE)
    with tempfile.TemporaryDirectory(prefix="kgqr-soak-") as scratch_dir, \
         scratch_cluster(settings, "soak", 3, *ports) as nodes:  # fmt: skip
        scratch = Path(scratch_dir)
        source = generated_catalog(scratch / SEARCH_KB, args.search_documents, seed=0)
        print(f"soak: ingesting {args.search_documents} documents to search ...", flush=True)
        done = kgqr(env, "ingest", "run", f"jsonl:{source}", "--kb", SEARCH_KB)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        copy = httpx.post(f"http://127.0.0.1:{HTTP_PORT}/_reindex?refresh=true", timeout=600,
                          json={"source": {"index": schema.documents_index(SEARCH_KB)},
                                "dest": {"index": PLAIN_INDEX}})  # fmt: skip
        copy.raise_for_status()
        questions = questions_from(source, 500)
        worker = subprocess.Popen(  # below the searches' priority, as a serving machine runs it
            ["nice", "-n", "10", *KGQR, "ingest", "worker"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            with proxy_process({k: v for k, v in env.items() if k.startswith("KGQR_")},
                               workers=2) as proxy:  # fmt: skip
                stop = threading.Event()
                started = time.monotonic()
                threads = [
                    threading.Thread(target=sample_forever,
                                     args=(record, started, proxy.pid, worker.pid, stop)),
                    threading.Thread(target=run_faults,
                                     args=(record, started, args.minutes, nodes, settings, stop)),
                    threading.Thread(target=ingest_forever, args=(
                        record, env, scratch, args.job_documents, started, stop)),
                ]  # fmt: skip
                for thread in threads:
                    thread.start()
                print(
                    f"soak: {args.minutes:g} minutes at {rates} through {proxy.front}", flush=True
                )
                asyncio.run(load(proxy.front, rates, questions, args.minutes * 60, record, started))
                stop.set()
                for thread in threads:
                    thread.join(timeout=900)
        finally:
            worker.terminate()
            worker.wait(timeout=60)
    rows = per_minute(record)
    print_minutes(rows, list(rates))
    failed = failed_outside_faults(record)
    growth = {key: memory_growth(rows, key) for key in ("proxy_rss_mb", "worker_rss_mb")}
    mismatched = [job["kb"] for job in record.jobs if not job["counts_match"]]
    print(f"soak: {len(record.searches)} searches; {len(failed)} failed outside a fault's "
          f"window; {len(record.jobs)} ingest jobs, counts mismatched in {mismatched or 'none'}; "
          f"memory at the end / minute 5: {growth}")  # fmt: skip
    save("soak", {
        "minutes": args.minutes, "rates_per_s": rates, "faults": record.faults,
        "per_minute": rows, "failed_outside_faults": failed[:200],
        "failed_outside_faults_count": len(failed), "ingest_jobs": record.jobs,
        "memory_end_over_minute_5": growth,
    })  # fmt: skip


if __name__ == "__main__":
    main()
