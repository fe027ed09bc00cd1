"""Re-embedding a knowledge base with another model while clients keep searching it:
every search answers with hits, every document is kept, and afterwards the KB's names
lead to the new vectors, which the proxy searches with the new model's queries."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import httpx
import pytest
from click.testing import CliRunner

from ingest import reembed
from ingest.kb_removal import drop_knowledge_base
from kgqr_core.embedder import Embedder, get_embedder
from kgqr_core.settings import Settings
from kgqr_ops.background_proxy import running_proxy
from kgqr_ops.cli import main
from plugin import kb_meta, schema
from tests.integration.ingest_helpers import TINY_KB, document_ids, enqueue_source, ingested
from tests.integration.search_helpers import explained_search

GEMMA = "embeddinggemma-300m"


@dataclass
class SearchLoop:
    """Searches a KB without pause, through the proxy and directly, counting what failed."""

    proxy_url: str
    opensearch: Any
    index: str
    searches: int = 0
    failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(timeout=60) as client:
            while not self.stop.is_set():
                response = client.post(
                    f"{self.proxy_url}/{self.index}/_search",
                    params={"kgqr.strategy": "base"},
                    json={"query": {"match": {"text": "thriller"}}},
                )
                if response.status_code != 200 or not response.json()["hits"]["hits"]:
                    self.failures.append(f"proxy {response.status_code}: {response.text[:200]}")
                try:
                    direct = self.opensearch.search(
                        index=self.index, body={"query": {"match": {"text": "thriller"}}}
                    )
                    if not direct["hits"]["hits"]:
                        self.failures.append("direct: no hits")
                except Exception as exc:  # every failure is what the test counts
                    self.failures.append(f"direct: {exc}")
                self.searches += 1


@contextmanager
def searching(proxy_url: str, opensearch: Any, index: str) -> Iterator[SearchLoop]:
    loop = SearchLoop(proxy_url, opensearch, index)
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.stop.set()
        thread.join(timeout=60)


@pytest.fixture
def tiny_kb(settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any,
            ingest_worker: Any, kb_name: str) -> Iterator[str]:  # fmt: skip
    with ingested(settings, opensearch, neo4j_driver, redis_client, TINY_KB, kb_name) as kb:
        yield kb


def test_reembedding_swaps_models_while_searches_answer(
    settings: Settings, opensearch: Any, redis_client: Any, tiny_kb: str
) -> None:
    index = schema.documents_index(tiny_kb)
    before = document_ids(opensearch, tiny_kb)
    old_index = reembed.concrete_index(opensearch, index)
    # Chosen on the old vectors: `kb show` says so once the KB holds others.
    chosen = kb_meta.set_default(opensearch, tiny_kb, "base", {}, "nothing beat base", "test")
    gemma = get_embedder(GEMMA)
    searches_per_batch: list[int] = []
    with running_proxy(settings) as url, searching(url, opensearch, index) as loop:
        while loop.searches < 3:
            threading.Event().wait(0.05)

        def progress(_progress: reembed.Progress) -> None:
            searches_per_batch.append(loop.searches)

        reembed.reembed(opensearch, redis_client, tiny_kb, gemma, 768, progress, batch=2)
        after_swap = loop.searches
        while loop.searches < after_swap + 3:
            threading.Event().wait(0.05)
    assert loop.failures == []
    assert searches_per_batch[-1] > searches_per_batch[0], "no search ran during the copy"

    assert document_ids(opensearch, tiny_kb) == before
    assert reembed.concrete_index(opensearch, index) == f"{index}-g2"
    assert not opensearch.indices.exists(index=old_index), "the old index was kept"
    mapping = opensearch.indices.get_mapping(index=index)[f"{index}-g2"]["mappings"]
    assert mapping["properties"]["vector"]["dimension"] == 768
    meta = kb_meta.load(opensearch, tiny_kb)
    assert meta is not None and (meta.embedder, meta.dimension) == (GEMMA, 768)
    assert reembed.in_progress(redis_client, tiny_kb) is None
    shown = CliRunner().invoke(main, ["kb", "show", tiny_kb])
    assert (f"note: v1 was set when the KB held {chosen.embedder}'s vectors, and it holds "
            f"{GEMMA}'s now") in shown.output, shown.output  # fmt: skip

    # The new vectors are Gemma's: its query for a plot finds that movie first.
    vector = gemma.encode_queries(["a cab driver held hostage by a hit man"])[0].tolist()
    knn = {"size": 1, "query": {"knn": {"vector": {"vector": vector, "k": 3}}}}
    assert opensearch.search(index=index, body=knn)["hits"]["hits"][0]["_id"] == "m2"

    # A proxy that reads the new meta embeds the KB's queries with Gemma.
    with running_proxy(settings.replaced({"query_embedder_models": GEMMA})) as url:
        response = explained_search(url, index, "base", "a cab driver held hostage by a hit man")
        assert response.status_code == 200, response.text
        assert "x-kgqr-fallback" not in response.headers
        assert response.json()["hits"]["hits"][0]["_id"] == "m2"
        assert "hybrid" in str(response.json()["kgqr"]["final_query"])
        # Moved again, to a model of the same size (given by path, which this proxy does
        # not embed with, so its refusal names the model it read): no error tells the proxy
        # its cached meta is stale, and queries of the old model met the new vectors for
        # the cache's minute. It reads the move with the list of knowledge bases.
        other = "/models/same-size-as-gemma"
        kb_meta.record(opensearch, meta.kb, {"embedder": other})
        deadline = time.monotonic() + 4 * settings.rewrite.kb_refresh_s
        while (fallback := _fallback(url, index)) is None and time.monotonic() < deadline:
            time.sleep(0.5)
    assert fallback is not None and other in fallback["reason"], fallback


def _fallback(url: str, index: str) -> dict[str, Any] | None:
    answer = explained_search(url, index, "base", "a cab driver held hostage by a hit man")
    assert answer.status_code == 200 and answer.json()["hits"]["hits"], answer.text
    fallback: dict[str, Any] | None = answer.json()["kgqr"]["fallback"]
    return fallback


def test_an_interrupted_reembed_resumes_and_holds_ingest_off(
    settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any, tiny_kb: str
) -> None:
    gemma = get_embedder(GEMMA)

    class Interrupted(Exception):
        pass

    def stop_after_first_batch(progress: reembed.Progress) -> None:
        if progress.copied > 0:
            raise Interrupted

    with pytest.raises(Interrupted):
        reembed.reembed(opensearch, redis_client, tiny_kb, gemma, 768, stop_after_first_batch,
                        batch=3)  # fmt: skip
    assert reembed.in_progress(redis_client, tiny_kb) == GEMMA
    with pytest.raises(ValueError, match="is being re-embedded"):
        enqueue_source(settings, opensearch, neo4j_driver, redis_client, TINY_KB, tiny_kb)
    with pytest.raises(reembed.ReembedError, match="unfinished"):
        reembed.reembed(opensearch, redis_client, tiny_kb, get_embedder(settings.embedder.model),
                        384, lambda _p: None)  # fmt: skip

    seen: list[reembed.Progress] = []
    done = reembed.reembed(opensearch, redis_client, tiny_kb, gemma, 768, seen.append, batch=3)
    documents = next(copy for copy in done.copies if copy.role == "documents")
    assert seen[0].copied == 3, "the resumed copy started over"
    assert documents.copied == len(document_ids(opensearch, tiny_kb)) == 8
    assert reembed.in_progress(redis_client, tiny_kb) is None


def test_vectors_of_an_older_document_form_are_reembedded_with_the_same_model(
    settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any, tiny_kb: str
) -> None:
    """A model's document form changed (its revision rose): ingest refuses to add vectors
    of the new form to a KB of the old, and a re-embed with the same model mends it."""
    index = schema.documents_index(tiny_kb)
    meta = kb_meta.load(opensearch, tiny_kb)
    assert meta is not None and meta.document_revision == 1
    kb_meta.record(opensearch, meta.kb, {"document_revision": 0})
    with pytest.raises(ValueError, match="older document form"):
        enqueue_source(settings, opensearch, neo4j_driver, redis_client, TINY_KB, tiny_kb)

    minilm = get_embedder(settings.embedder.model)
    reembed.reembed(opensearch, redis_client, tiny_kb, minilm, 384, lambda _p: None)
    meta = kb_meta.load(opensearch, tiny_kb)
    assert meta is not None and meta.document_revision == 1
    with pytest.raises(reembed.ReembedError, match="already holds"):
        reembed.reembed(opensearch, redis_client, tiny_kb, minilm, 384, lambda _p: None)
    # Each vector is the document's title and body in the model's form.
    hit = opensearch.get(index=index, id="m2")["_source"]
    expected = minilm.encode([hit["body"]], [hit["title"]])[0]
    assert sum(a * b for a, b in zip(hit["vector"], expected, strict=True)) > 0.9999


class _DroppedWhileEmbedding:
    """The re-embed's embedder, whose second batch sees its KB dropped while it embeds:
    between reading that batch and writing it."""

    def __init__(self, real: Embedder, drop: Callable[[], object]) -> None:
        self.real, self.drop, self.batches = real, drop, 0
        self.model_name = real.model_name

    def encode(self, texts: Any, titles: Any) -> Any:
        self.batches += 1
        if self.batches == 2:
            self.drop()
        return self.real.encode(texts, titles)


def test_a_reembed_stops_at_its_next_write_once_its_kb_is_dropped(
    settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any, tiny_kb: str
) -> None:
    """Its write would make the dropped KB's new index again (and its kgqr-meta record at
    the swap): the drop deletes the re-embed's state, and the write, which holds a lease on
    that state, finds it gone."""
    meta = kb_meta.load(opensearch, tiny_kb)
    assert meta is not None  # an older document form: a re-embed with the same model runs
    kb_meta.record(opensearch, meta.kb, {"document_revision": 0})
    minilm = get_embedder(settings.embedder.model)
    dropping = _DroppedWhileEmbedding(
        minilm, lambda: drop_knowledge_base(opensearch, neo4j_driver, redis_client, tiny_kb)
    )
    with pytest.raises(reembed.ReembedError, match="dropped during the re-embed"):
        reembed.reembed(opensearch, redis_client, tiny_kb, cast(Embedder, dropping), 384,
                        lambda _p: None, batch=3)  # fmt: skip
    assert dropping.batches == 2
    left = opensearch.indices.get(index=f"kgqr-{tiny_kb}-*", ignore_unavailable=True)
    assert list(left) == []
    assert kb_meta.load(opensearch, tiny_kb) is None
    assert reembed.in_progress(redis_client, tiny_kb) is None


def test_a_reembedded_kb_keeps_its_shards_and_replicas(
    settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any,
    ingest_worker: Any, kb_name: str,
) -> None:  # fmt: skip
    """The new generation was made from the template (one shard, 0-1 replicas): a KB of
    two shards and one replica came back from its re-embed without the replica."""
    laid_out = settings.replaced({"kb_shards": 2, "kb_replicas": "1"})
    with ingested(laid_out, opensearch, neo4j_driver, redis_client, TINY_KB, kb_name) as kb:
        minilm = get_embedder(settings.embedder.model)
        kb_meta.record(opensearch, kb, {"document_revision": 0})  # an older form: re-embed
        reembed.reembed(opensearch, redis_client, kb, minilm, 384, lambda _p: None)
        name = schema.documents_index(kb)
        ((concrete, answer),) = opensearch.indices.get_settings(index=name).items()
        assert concrete == schema.generation_index(name, 2)  # the new generation
        index = answer["settings"]["index"]
        assert (index["number_of_shards"], index["number_of_replicas"]) == ("2", "1")
