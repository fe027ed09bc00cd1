"""Indices built by LangChain, Haystack and LlamaIndex, unmodified, with their default
field names: attached, given a graph from a relations file keyed by the clients' own ids,
and searched by each client's own retriever call with only its URL changed to kgqr's
front. The graph then lifts what the vector alone leaves out.

The clients run in their own venv (tests/compat/retriever_calls.py); the movie KB's
documents carry MiniLM vectors made here, as a team's embedding model would make them.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ingest.kb_removal import drop_knowledge_base
from kgqr_core.embedder import get_embedder
from kgqr_core.settings import Settings
from kgqr_ops.background_proxy import free_port, running_proxy
from kgqr_ops.nginx_front import ROUTES_REFRESH_S, running_front
from kgqr_ops.services.local_service import port_of
from plugin import kb_meta
from tests.integration.test_attached_index import FIXTURE, kgqr, team_documents
from tests.integration.test_client_compat import REPO, compat_python  # noqa: F401 (fixture)

DRIVER = REPO / "tests" / "compat" / "retriever_calls.py"
CLIENTS = ["langchain", "haystack", "llamaindex"]
# The field map each client's mapping suggests: its text and its vector field.
SUGGESTED = {
    "langchain": ("text", "vector_field"),
    "haystack": ("content", "embedding"),
    "llamaindex": ("content", "embedding"),
}


@pytest.fixture(scope="module")
def front(settings: Settings) -> Iterator[str]:
    """kgqr with `graph` as its default strategy, behind its front: a client that changes
    only its URL gets the graph."""
    proxied = settings.replaced({"rewrite_default_strategy": "graph"})
    with (
        running_proxy(proxied) as url,
        running_front(proxied, "127.0.0.1", free_port(), port_of(url, 0)) as front_url,
    ):
        yield front_url


@pytest.fixture(scope="module")
def corpus(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("retrievers")
    docs = folder / "docs.jsonl"
    with docs.open("w") as out:
        for doc_id, source in team_documents(settings.embedder.model):
            line = {"id": doc_id, "title": source["headline"], "text": source["content"],
                    "vector": source["embedding"]}  # fmt: skip
            out.write(json.dumps(line) + "\n")
    queries = folder / "queries.jsonl"
    vector = get_embedder(settings.embedder.model).encode_queries(["Tom Cruise hitman"])[0]
    queries.write_text(json.dumps({"id": "q1", "vector": vector.tolist()}) + "\n")
    return {"docs": docs, "queries": queries}


def _wait_for_the_fronts_route(front: str, index: str) -> None:
    """The front started before this index was attached: it routes the index to kgqr once
    it has reread the attached indices (every ROUTES_REFRESH_S). A search with no kgqr in
    its URL answers with an explain only when kgqr got it."""
    deadline = time.monotonic() + 3 * ROUTES_REFRESH_S
    body = {"size": 1, "query": {"match_all": {}}, "ext": {"kgqr": {"explain": True}}}
    while "kgqr" not in httpx.post(f"{front}/{index}/_search", json=body, timeout=60).json():
        assert time.monotonic() < deadline, f"the front never routed {index} to kgqr"
        time.sleep(1)


def _drive(python: str, action: str, client: str, url: str, index: str, **files: Any) -> None:
    options = [f"--{name}={value}" for name, value in files.items()]
    done = subprocess.run([python, str(DRIVER), action, client, "--url", url, "--index", index,
                           *options], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def _ranked(python: str, client: str, url: str, index: str, queries: Path, out: Path) -> list[str]:
    _drive(python, "search", client, url, index, queries=queries, k=4, out=out)
    return list(json.loads(out.read_text().splitlines()[0])["ranked"])


@pytest.mark.parametrize("client", CLIENTS)
def test_a_clients_own_retriever_gets_the_graph_through_kgqr(
    client: str, compat_python: str, settings: Settings, opensearch: Any, neo4j_driver: Any,  # noqa: F811
    redis_client: Any, ingest_worker: Any, front: str, corpus: dict[str, Path], tmp_path: Path,
) -> None:  # fmt: skip
    index = kb = f"team-{client}"
    drop_knowledge_base(opensearch, neo4j_driver, redis_client, kb)
    opensearch.indices.delete(index=index, ignore=[404])
    try:
        _drive(compat_python, "write", client, settings.opensearch.url, index, docs=corpus["docs"])
        opensearch.indices.refresh(index=index)
        attached = kgqr("kb", "attach", kb, "--index", index, "--model", settings.embedder.model)
        assert attached.exit_code == 0, attached.output
        meta = kb_meta.load(opensearch, kb)
        assert meta is not None and meta.attached is not None
        text, vector = SUGGESTED[client]
        assert text in meta.attached.text_fields and meta.attached.vector_field == vector
        built = kgqr("kb", "graph", kb, "--relations", str(FIXTURE / "relations.jsonl"))
        assert built.exit_code == 0, built.output
        _wait_for_the_fronts_route(front, index)
        queries = corpus["queries"]
        direct = _ranked(compat_python, client, settings.opensearch.url, index, queries,
                         tmp_path / "direct.jsonl")  # fmt: skip
        through = _ranked(compat_python, client, front, index, queries, tmp_path / "via.jsonl")
        # Tom Cruise first either way; Collateral (m2), which names neither him nor a
        # hitman, only through kgqr, where the graph links it to him.
        assert direct[0] == through[0] == "p3", (direct, through)
        assert "m2" not in direct and "m2" in through, (direct, through)
        assert len(through) == len(direct) == 4
    finally:
        drop_knowledge_base(opensearch, neo4j_driver, redis_client, kb)
        opensearch.indices.delete(index=index, ignore=[404])
