"""KG-CQR's completion and end-to-end run on a small corpus graph written by ingest."""

from __future__ import annotations

import asyncio
import os
import pickle
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ingest.chunk_ingest import ingest_chunk
from ingest.kb_removal import drop_knowledge_base
from ingest.records import CorpusTriple, Document
from ingest.worker_resources import WorkerResources
from kgqr_core import connections
from kgqr_core.embedder import get_embedder
from kgqr_core.settings import Settings
from kgqr_ops.background_proxy import running_proxy
from plugin import schema
from plugin.kb_meta import DocumentStructure
from query_rewriter.engine.gateway import EngineSession, opensearch_http_client
from query_rewriter.graph.store import Neo4jGraph
from query_rewriter.strategies.context import StrategyContext
from query_rewriter.strategies.knowledge.kgcqr import ContextualQueryRetrieval
from tests.integration.search_helpers import explained_search

KB = "kgcqr-chain"
REPO = Path(__file__).resolve().parents[2]
QUERY = "How is Alpha Corp connected to Delta Labs through Beta and Gamma?"
CHAIN = [  # the known path Alpha -> Beta -> Gamma -> Delta
    ("Alpha Corp", "founded", "Beta Holdings", "Alpha Corp founded Beta Holdings in 1990."),
    ("Beta Holdings", "owns", "Gamma Systems", "Beta Holdings owns Gamma Systems."),
    ("Gamma Systems", "acquired", "Delta Labs", "Gamma Systems acquired Delta Labs in 2005."),
]
DISTRACTORS = [
    ("Alpha Corp", "sponsors", f"Team {i}", f"Alpha Corp sponsors the football Team {i}.")
    for i in range(6)
]
KEPT = [  # what the LLM filter kept: triples naming Alpha Corp and Delta Labs, not the path
    ("Alpha Corp", "is based in", "Oslo", "Alpha Corp is based in Oslo."),
    ("Delta Labs", "researches", "batteries", "Delta Labs researches batteries."),
]


def _triple(head: str, relation: str, tail: str, ttr: str) -> CorpusTriple:
    passage = "p2" if "Delta" in head + tail else "p1"
    return CorpusTriple(head=head, relation=relation, tail=tail, ttr=ttr, ttr_source="given",
                        passage_id=passage)  # fmt: skip


TRIPLES = [_triple(*row) for row in [*CHAIN, *DISTRACTORS, *KEPT]]
KEPT_TRIPLES = TRIPLES[-len(KEPT) :]
PASSAGES = [
    Document(id="p1", type="passage", title="Alpha Corp history",
             text="Alpha Corp founded Beta Holdings, which owns Gamma Systems."),
    Document(id="p2", type="passage", title="Delta Labs",
             text="Delta Labs was acquired by Gamma Systems and researches batteries."),
]  # fmt: skip
# One ingest chunk holding the whole knowledge base (also used on the secured node).
CHAIN_RECORDS = [record.model_dump(mode="json") for record in [*PASSAGES, *TRIPLES]]


@pytest.fixture(scope="module")
def chain_kb(
    settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any
) -> Iterator[str]:
    from ingest import job_runner

    drop_knowledge_base(opensearch, neo4j_driver, redis_client, KB)
    job_runner.prepare_stores(settings, opensearch, neo4j_driver)
    resources = WorkerResources(settings)
    outcome = ingest_chunk(resources, f"{KB}-{uuid.uuid4().hex[:8]}", KB, 0, CHAIN_RECORDS)
    resources.neo4j.close()
    assert outcome.counts["triples"] == len(TRIPLES)
    opensearch.indices.refresh(index=f"kgqr-{KB}-*")
    yield KB
    drop_knowledge_base(opensearch, neo4j_driver, redis_client, KB)


async def _with_strategy_context(
    settings: Settings, use: Any, query_vector: np.ndarray | None = None
) -> Any:
    """Run `use(ctx, embed)` with a strategy context over the chain knowledge base; given
    the query's vector, `embed` returns it without loading the model."""
    embedder = None if query_vector is not None else get_embedder(settings.embedder.model)

    async def embed(texts: list[str]) -> np.ndarray:
        return embedder.encode(texts) if embedder else np.array([query_vector] * len(texts))

    async with opensearch_http_client(settings) as http, connections.async_neo4j_driver(
        settings
    ) as graph:  # fmt: skip
        ctx = StrategyContext(settings, schema.documents_index(KB), KB, DocumentStructure(),
                              None, EngineSession(http, {}), embed, graph=Neo4jGraph(graph),  # type: ignore[arg-type]
                              declared=ContextualQueryRetrieval().declared())  # fmt: skip
        return await use(ctx, embed)


def completed_chain(
    settings: Settings, query_vector: np.ndarray | None = None
) -> list[dict[str, Any]]:
    """The triples KG-CQR's completion adds to the kept ones, in the order it adds them."""

    async def complete(ctx: StrategyContext, embed: Any) -> list[dict[str, Any]]:
        kept_rows = [{"id": k.triple_id, "head": k.head, "tail": k.tail} for k in KEPT_TRIPLES]
        query_vector = (await embed([QUERY]))[0]
        return await ContextualQueryRetrieval().completion(
            ctx, schema.triples_index(KB), query_vector, kept_rows
        )

    return list(asyncio.run(_with_strategy_context(settings, complete, query_vector)))


def test_beam_search_completes_the_known_path(settings: Settings, chain_kb: str) -> None:
    added = completed_chain(settings)
    assert {(t["head"], t["tail"]) for t in added} == {(h, t) for h, _, t, _ in CHAIN}


def test_the_completion_is_the_same_in_every_process(settings: Settings, chain_kb: str) -> None:
    """Its order reaches the prompt, so it must not follow Python's per-process string
    hashing (set order): a KG-CQR rewrite cached by one process is then found by the next,
    and two evaluation runs score the same rewrites."""
    # Pickled, not JSON: a JSON dump masks the settings' secrets ("**********"). The
    # query's vector goes with them: loading the model took most of each process's time.
    query_vector = get_embedder(settings.embedder.model).encode([QUERY])[0]
    program = (
        "import json, pickle, sys\n"
        "from tests.integration.test_kgcqr import completed_chain\n"
        "added = completed_chain(*pickle.load(sys.stdin.buffer))\n"
        "print(json.dumps([[t['head'], t['relation'], t['tail']] for t in added]))\n"
    )
    orders = {
        subprocess.run(
            [sys.executable, "-c", program], input=pickle.dumps((settings, query_vector)),
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            check=True, capture_output=True, cwd=REPO,
        ).stdout.decode().strip().splitlines()[-1]
        for seed in range(6)
    }  # fmt: skip
    assert len(orders) == 1 and orders != {"[]"}, orders


def test_no_ttr_ablation_never_selects_triples_through_their_ttr(
    settings: Settings, chain_kb: str
) -> None:
    query = "Delta Labs 1990"  # "1990" occurs only in the TTR of Alpha Corp founded Beta

    async def retrieve(ctx: StrategyContext, embed: Any) -> list[dict[str, Any]]:
        query_vector = (await embed([query]))[0]
        return await ContextualQueryRetrieval("kgcqr_no_ttr", use_ttr=False).top_triples(
            ctx, query, query_vector
        )

    rows = asyncio.run(_with_strategy_context(settings, retrieve))
    assert {(r["head"], r["tail"]) for r in rows} == {
        ("Gamma Systems", "Delta Labs"),
        ("Delta Labs", "batteries"),
    }
    assert (
        ContextualQueryRetrieval("kgcqr_no_ttr", use_ttr=False).fact(rows[0])
        == f"{rows[0]['head']} {rows[0]['relation']} {rows[0]['tail']}"
    )


def test_kgcqr_end_to_end(llm_settings: Settings, chain_kb: str) -> None:
    with running_proxy(llm_settings) as url:
        response = explained_search(url, schema.documents_index(KB), "kgcqr", QUERY, size=2)
    explain = response.json()["kgqr"]
    assert explain["fallback"] is None, explain["fallback"]
    assert explain["details"]["retrieved_triples"] and explain["details"]["kept_triples"]
    assert explain["context"] and explain["expansions"] == [explain["context"]]
    assert explain["llm_calls"] == 2
    assert {"triple_retrieval", "filter", "completion", "context"} <= set(explain["stages_ms"])
