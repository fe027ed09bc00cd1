"""The local node cannot be taken down by a client's vector mapping, has the standard
modules clients rely on, and a node that dies on an old unrunnable index says why."""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from kgqr_core.settings import Settings
from kgqr_ops.background_proxy import free_port
from kgqr_ops.services.errors import ServiceError
from kgqr_ops.services.opensearch_node import OpenSearchNode

VECTOR = {"type": "knn_vector", "dimension": 3}
# The default mappings of the vector stores users bring (the field names are theirs).
CLIENT_MAPPINGS = {
    "llamaindex-faiss": {"embedding": {**VECTOR, "method": {
        "name": "hnsw", "space_type": "l2", "engine": "faiss",
        "parameters": {"ef_construction": 256, "m": 48}}}},
    "haystack-faiss": {"embedding": {**VECTOR, "method": {
        "space_type": "cosinesimil", "name": "hnsw", "engine": "faiss"}}},
    "langchain-nmslib": {"vector_field": {**VECTOR, "method": {
        "name": "hnsw", "space_type": "l2", "engine": "nmslib"}}},
    "no-engine": {"v": VECTOR},
}  # fmt: skip


def _create(url: str, index: str, properties: dict[str, Any]) -> httpx.Response:
    body = {"settings": {"index": {"knn": True}}, "mappings": {"properties": properties}}
    return httpx.put(f"{url}/{index}", json=body, timeout=60)


@pytest.mark.parametrize("client", sorted(CLIENT_MAPPINGS))
def test_a_mapping_the_node_cannot_run_is_a_clear_400_on_every_path(
    entry_url: str, settings: Settings, unique_name: str, client: str
) -> None:
    direct = _create(settings.opensearch.url.rstrip("/"), unique_name, CLIENT_MAPPINGS[client])
    assert direct.status_code == 400, direct.text
    error = direct.json()["error"]
    assert error["type"] == "illegal_argument_exception"
    assert '"engine": "lucene"' in error["reason"]
    via = _create(entry_url, unique_name, CLIENT_MAPPINGS[client])
    assert (via.status_code, via.json()) == (400, direct.json())
    assert httpx.head(f"{settings.opensearch.url.rstrip('/')}/{unique_name}").status_code == 404


def test_lucene_vectors_mapping_updates_and_templates_are_checked(
    settings: Settings, unique_name: str
) -> None:
    url = settings.opensearch.url.rstrip("/")
    lucene = {**VECTOR, "method": {"name": "hnsw", "engine": "lucene", "space_type": "l2"}}
    assert _create(url, unique_name, {"v": lucene}).status_code == 200
    try:
        added = httpx.put(f"{url}/{unique_name}/_mapping", json={"properties": {"w": VECTOR}})
        assert added.status_code == 400 and "field [w]" in added.text
        faiss_template = {
            "index_patterns": [f"{unique_name}-t-*"],
            "template": {"mappings": {"dynamic_templates": [{"vectors": {
                "match": "vec_*", "mapping": CLIENT_MAPPINGS["haystack-faiss"]["embedding"]}}]}},
        }  # fmt: skip
        template = httpx.put(f"{url}/_index_template/{unique_name}", json=faiss_template)
        assert template.status_code == 400 and "engine [faiss]" in template.text
        indexed = httpx.post(
            f"{url}/{unique_name}/_doc", params={"refresh": "true"}, json={"v": [1, 2, 3]}
        )
        assert indexed.status_code == 201
        assert httpx.get(f"{url}/_cluster/health").json()["status"] in ("green", "yellow")
    finally:
        httpx.delete(f"{url}/{unique_name}")


def test_a_mapping_update_naming_a_plain_index_and_a_knn_indexs_alias_is_checked(
    settings: Settings, unique_name: str
) -> None:
    """The names of one update were judged together: a plain index among them made the
    alias of a k-NN index beside it pass, and that index took a field on the default
    (native) engine, which takes the node down at its first vector."""
    url = settings.opensearch.url.rstrip("/")
    plain, knn, alias = f"{unique_name}-notes", f"{unique_name}-vecs-1", f"{unique_name}-vecs"
    lucene = {**VECTOR, "method": {"name": "hnsw", "engine": "lucene", "space_type": "l2"}}
    try:
        assert httpx.put(f"{url}/{plain}", json={}).status_code == 200
        assert _create(url, knn, {"v": lucene}).status_code == 200
        assert httpx.put(f"{url}/{knn}/_alias/{alias}").status_code == 200
        for names in (f"{plain},{alias}", f"{alias},{plain}", f"{unique_name}-v*s,{plain}"):
            added = httpx.put(f"{url}/{names}/_mapping", json={"properties": {"w": VECTOR}})
            assert added.status_code == 400 and "field [w]" in added.text, (names, added.text)
        mapped = httpx.get(f"{url}/{knn}/_mapping").json()[knn]["mappings"]["properties"]
        assert "w" not in mapped
    finally:
        httpx.delete(f"{url}/{plain},{knn}")


def test_the_standard_modules_clients_rely_on_are_there(
    settings: Settings, unique_name: str
) -> None:
    url = settings.opensearch.url.rstrip("/")
    pipeline = {"processors": [{"set": {"field": "via", "value": "ingest-common"}},
                               {"lowercase": {"field": "title"}}]}  # fmt: skip
    assert httpx.put(f"{url}/_ingest/pipeline/{unique_name}", json=pipeline).status_code == 200
    mapping = {"properties": {"title": {"type": "text", "analyzer": "stop"},
                              "rank": {"type": "rank_feature"}, "n": {"type": "integer"},
                              "relation": {"type": "join", "relations": {"q": "a"}}}}  # fmt: skip
    assert httpx.put(f"{url}/{unique_name}", json={"mappings": mapping}).status_code == 200
    try:
        for n in range(3):
            stored = httpx.put(
                f"{url}/{unique_name}/_doc/{n}",
                params={"pipeline": unique_name, "refresh": "true"},
                json={"title": f"The TITLE {n}", "rank": n + 1, "n": n, "relation": "q"},
            )
            assert stored.status_code == 201, stored.text
        doc = httpx.get(f"{url}/{unique_name}/_doc/0").json()["_source"]
        assert doc["via"] == "ingest-common" and doc["title"] == "the title 0"
        stopped = httpx.post(
            f"{url}/{unique_name}/_search", json={"query": {"match": {"title": "the"}}}
        )
        assert stopped.json()["hits"]["total"]["value"] == 0  # analysis-common's stop analyzer
        deleted = httpx.post(
            f"{url}/{unique_name}/_delete_by_query",
            params={"refresh": "true"},
            json={"query": {"ids": {"values": ["1"]}}},
        )
        assert deleted.status_code == 200 and deleted.json()["deleted"] == 1
        updated = httpx.post(f"{url}/{unique_name}/_update_by_query", json={})
        assert updated.status_code == 200 and updated.json()["updated"] == 2
        rendered = httpx.post(
            f"{url}/_render/template",
            json={"source": '{"query": {"match": {"title": "{{q}}"}}}', "params": {"q": "x"}},
        )
        assert rendered.status_code == 200  # lang-mustache
        stats = {"size": 0, "aggs": {"m": {"matrix_stats": {"fields": ["n"]}}}}
        assert httpx.post(f"{url}/{unique_name}/_search", json=stats).status_code == 200
    finally:
        httpx.delete(f"{url}/{unique_name}")
        httpx.delete(f"{url}/_ingest/pipeline/{unique_name}")


class ScratchNode(OpenSearchNode):
    """A throwaway node from the same install. With the guard off, an index it cannot run
    can be made the way it was before the guard existed."""

    name = "opensearch-scratch"
    cluster_name = "kgqr-scratch"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._port, self._transport = free_port(), free_port()
        self.guard = False

    @property
    def port(self) -> int:
        return self._port

    @property
    def data_dir(self) -> Path:
        return self.data_root(self.settings) / "opensearch-scratch"

    def node_options(self) -> list[str]:
        guard = f"kgqr.engine_guard.enabled={str(self.guard).lower()}"
        return ["-E", f"transport.port={self._transport}", "-E", guard]


def test_an_unrunnable_index_from_before_the_guard_is_named_and_removed(
    settings: Settings,
) -> None:
    from kgqr_ops.services.unrunnable_indices import DELETE_COMMAND, delete_unrunnable

    node = ScratchNode(settings.replaced({"opensearch_heap_mb": 512}))
    shutil.rmtree(node.data_dir, ignore_errors=True)
    url = f"http://127.0.0.1:{node.port}"
    try:
        node.up()
        assert _create(url, "old-vectors", CLIENT_MAPPINGS["llamaindex-faiss"]).status_code == 200
        assert _create(url, "kept", {"v": {**VECTOR, "method": {
            "name": "hnsw", "engine": "lucene"}}}).status_code == 200  # fmt: skip
        # As a vector store writes: a bulk request, whose documents reach the translog; the
        # unguarded node then dies at its next refresh, and again each time it replays them.
        lines = b'{"index": {"_index": "old-vectors"}}\n{"embedding": [1, 2, 3]}\n' * 5
        with contextlib.suppress(httpx.HTTPError):  # the node may die before it answers
            httpx.post(f"{url}/_bulk", content=lines, timeout=60,
                       headers={"content-type": "application/x-ndjson"})  # fmt: skip
        deadline = time.monotonic() + 90
        while node.process.pid() is not None:
            assert time.monotonic() < deadline, "the unguarded node did not die"
            time.sleep(1)
        node.guard = True
        with pytest.raises(ServiceError) as failure:
            node.up()
        assert "old-vectors: embedding (engine faiss)" in str(failure.value)
        assert DELETE_COMMAND in str(failure.value) and "kept" not in str(failure.value)
        assert node.process.pid() is not None, "the guarded node must stay up"
        asked: list[dict[str, list[str]]] = []

        def agree(found: dict[str, list[str]]) -> bool:
            asked.append(found)
            return True

        assert delete_unrunnable(node, agree) == asked[0]
        assert asked == [{"old-vectors": ["embedding (engine faiss)"]}]
        node.up()
        indices, health = node.get("/_cat/indices?format=json"), node.get("/_cluster/health")
        assert indices is not None and health is not None
        assert [row["index"] for row in indices] == ["kept"]
        assert health["status"] in ("green", "yellow")
    finally:
        node.down()
        shutil.rmtree(node.data_dir, ignore_errors=True)
