"""The clients users already have, unmodified, through kgqr: each one's usual calls against
OpenSearch directly, the nginx front and `kgqr serve` (gzip bodies on) must get the same
answers; on a kgqr-managed index they must parse kgqr's rewritten answers, and where a
client can pass them, `kgqr.*` parameters and `ext.kgqr` must work.

The clients run in their own venv (scripts/compat_venv.sh) through
tests/compat/client_calls.py, which records each call's result or error."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kgqr_core.settings import Settings
from kgqr_ops.background_proxy import free_port
from kgqr_ops.nginx_front import running_front
from kgqr_ops.services.local_service import port_of

REPO = Path(__file__).resolve().parents[2]
CLIENTS = ["opensearch-py", "opensearch-dsl", "haystack", "llamaindex", "langchain"]
PATHS = ["direct", "front", "kgqr"]
# Steps whose client asks kgqr to explain (params or ext): the explain must come back.
EXPLAINED_STEPS = {"kgqr params", "ext.kgqr", "msearch kgqr"}


@pytest.fixture(scope="module")
def compat_python() -> str:
    built = subprocess.run(
        ["bash", str(REPO / "scripts" / "compat_venv.sh")], capture_output=True, text=True
    )
    assert built.returncode == 0, f"could not build the clients' venv:\n{built.stderr[-3000:]}"
    return built.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def records(
    compat_python: str,
    settings: Settings,
    proxy_url: str,
    movies_kb: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, list[dict[str, Any]]]]:
    """Every client's records on each path, the paths run one after another."""
    mapping = httpx.get(f"{settings.opensearch.url}/{movies_kb}/_mapping").json()
    (index_mapping,) = mapping.values()  # keyed by the index behind the KB's alias
    dimension = index_mapping["mappings"]["properties"]["vector"]["dimension"]
    folder = tmp_path_factory.mktemp("compat")
    with running_front(settings, "127.0.0.1", free_port(), port_of(proxy_url, 0)) as front:
        urls = {"direct": settings.opensearch.url.rstrip("/"), "front": front, "kgqr": proxy_url}
        found = {}
        for path, url in urls.items():
            out = folder / f"{path}.json"
            run = subprocess.run(
                [compat_python, str(REPO / "tests" / "compat" / "client_calls.py"),
                 "--url", url, "--managed-index", movies_kb, "--dimension", str(dimension),
                 "--out", str(out), "--gzip"],
                capture_output=True, text=True, timeout=900,
            )  # fmt: skip
            assert run.returncode == 0, f"{path}: the client driver failed:\n{run.stderr[-3000:]}"
            found[path] = json.loads(out.read_text())
        yield found


def _outcome(step: dict[str, Any]) -> Any:
    return {"error": step["error"]} if "error" in step else {"result": step["result"]}


def _table(records: dict[str, list[dict[str, Any]]], client: str) -> str:
    """One row per call: its outcome on each path (for failure messages and the notes)."""
    rows = [f"| {client} call | " + " | ".join(PATHS) + " |", "|---" * (len(PATHS) + 1) + "|"]
    by_path = {path: [s for s in steps if s["client"] == client] for path, steps in records.items()}
    for n, step in enumerate(by_path["direct"]):
        cells = []
        for path in PATHS:
            other = by_path[path][n] if n < len(by_path[path]) else {"error": {"class": "missing"}}
            error = other.get("error")
            cells.append(f"{error.get('status', error['class'])}" if error else "ok")
        rows.append(f"| {step['step']} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _refused_engine(step: str) -> bool:
    """A step on a client's default k-NN engine, which the engine guard refuses."""
    return "faiss" in step or "nmslib" in step


@pytest.mark.parametrize("client", CLIENTS)
def test_each_client_gets_the_same_answers_on_every_path(
    records: dict[str, list[dict[str, Any]]], client: str
) -> None:
    steps = {path: [s for s in found if s["client"] == client] for path, found in records.items()}
    table = _table(records, client)
    names = [s["step"] for s in steps["direct"]]
    assert names and "setup" not in names, f"{client} did not run:\n{steps['direct']}"
    # Alike on every path is no proof where the call failed on each: only kgqr's options
    # (which plain OpenSearch refuses) and the default engines' refusals fail directly.
    failed = [s for s in steps["direct"]
              if "error" in s and not s["managed"] and not _refused_engine(s["step"])]  # fmt: skip
    assert not failed, f"{client} failed on OpenSearch itself:\n{json.dumps(failed)[:3000]}"
    for path in ("front", "kgqr"):
        assert [s["step"] for s in steps[path]] == names, table
        for direct, via in zip(steps["direct"], steps[path], strict=True):
            if direct["managed"]:
                continue  # plain OpenSearch rewrites nothing and rejects kgqr's options
            assert _outcome(via) == _outcome(direct), (
                f"{client} / {direct['step']} differs through {path}:\n"
                f"direct: {json.dumps(_outcome(direct))[:1500]}\n"
                f"{path}: {json.dumps(_outcome(via))[:1500]}\n{table}"
            )


@pytest.mark.parametrize("client", CLIENTS)
def test_each_client_reads_rewritten_answers_on_a_managed_index(
    records: dict[str, list[dict[str, Any]]], client: str
) -> None:
    for path in ("front", "kgqr"):
        managed = [s for s in records[path] if s["client"] == client and s["managed"]]
        assert managed, f"{client} has no call on the managed index"
        for step in managed:
            assert "error" not in step, f"{client} / {step['step']} via {path}: {step}"
            result = step["result"]
            for answer in result if isinstance(result, list) else [result]:
                if step["step"] in EXPLAINED_STEPS:
                    assert answer["strategy"] == "base" and answer["fallback"] is None, step
                    assert answer["hits"] > 0, step
                else:
                    assert answer > 0, f"{client} / {step['step']} via {path} found nothing"


def test_a_mapping_the_node_cannot_run_fails_the_same_way_for_every_vector_store(
    records: dict[str, list[dict[str, Any]]],
) -> None:
    """Their default engines (faiss, nmslib) get the guard's 400 on every path, and the
    node survives it (the other calls after it ran)."""
    for path, steps in records.items():
        refused = {s["client"]: s.get("error") for s in steps if _refused_engine(s["step"])}
        assert set(refused) == {"opensearch-py", "haystack", "llamaindex", "langchain"}, path
        for client, error in refused.items():
            assert error is not None and error.get("status") == 400, f"{client} via {path}"
