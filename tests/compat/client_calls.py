"""The usual calls of the OpenSearch clients users bring, against one URL, recorded.

Runs in its own venv (tests/compat/requirements.txt: Haystack, LlamaIndex and LangChain
pull in far more than kgqr needs), driven by tests/integration/test_client_compat.py,
which runs it against OpenSearch directly, the nginx front and `kgqr serve`, and compares
the records. Each step records what the client returned, reduced to what a user sees
(ids, counts, sources, facets), or the error it raised (its class and HTTP status).
Index names are fixed, so records of different paths compare as they are.

    python client_calls.py --url URL --managed-index kgqr-KB-documents --out FILE [--gzip]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import Any

DIM = 3
WORDS = ["alpha", "beta", "gamma", "delta"]
DOCS: list[dict[str, Any]] = [
    {
        "id": str(n),
        "title": f"{WORDS[n % 4]} report {n}",
        "tag": "even" if n % 2 == 0 else "odd",
        "n": n,
        "v": [math.cos(n), math.sin(n), 1.0 / (n + 1)],
    }
    for n in range(12)
]
LUCENE_HNSW = {"name": "hnsw", "space_type": "l2", "engine": "lucene"}
MANAGED_QUERY = "professional bank robbers chased by the police"


def vector_of(text: str, dim: int) -> list[float]:
    """A deterministic stand-in embedding: the clients need one; meaning is not tested."""
    digest = hashlib.sha256(text.encode()).digest()
    raw = [digest[i % len(digest)] / 255.0 + 0.01 for i in range(dim)]
    norm = math.sqrt(sum(x * x for x in raw))
    return [x / norm for x in raw]


class Recorder:
    def __init__(self, client: str) -> None:
        self.client = client
        self.steps: list[dict[str, Any]] = []

    def step(self, name: str, call: Callable[[], Any], managed: bool = False) -> Any:
        """Run one call; record its reduced result, or its error."""
        try:
            value = call()
            self.steps.append(
                {"client": self.client, "step": name, "managed": managed, "result": plain(value)}
            )
            return value
        except Exception as exc:
            self.steps.append(
                {
                    "client": self.client,
                    "step": name,
                    "managed": managed,
                    "error": error_of(exc),
                    "detail": "".join(traceback.format_exception_only(exc)).strip()[-400:],
                }
            )
            return None


def error_of(exc: BaseException) -> dict[str, Any]:
    """The error's class and, from it or what it wraps, the HTTP status and error type."""
    seen: BaseException | None = exc
    while seen is not None:
        status = getattr(seen, "status_code", None)
        if isinstance(status, int):
            info = getattr(seen, "info", None)
            kind = info.get("error", {}).get("type") if isinstance(info, dict) else None
            return {"class": type(exc).__name__, "status": status, "type": kind}
        seen = seen.__cause__ or seen.__context__
    return {"class": type(exc).__name__}


VOLATILE = {"took", "_scroll_id", "_shards", "_seq_no", "_primary_term"}


def plain(value: Any) -> Any:
    """JSON-able, without fields that differ between two identical runs."""
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, float):
        return round(value, 5)
    if value is None or isinstance(value, str | int | bool):
        return value
    return repr(value)


def hit_ids(result: dict[str, Any]) -> list[str]:
    return [hit["_id"] for hit in result["hits"]["hits"]]


def explained(result: dict[str, Any]) -> dict[str, Any]:
    """What a kgqr-managed search answered: hits, and whether kgqr explained it."""
    explain = result.get("kgqr") or {}
    return {
        "hits": len(result["hits"]["hits"]),
        "strategy": explain.get("strategy"),
        "fallback": explain.get("fallback"),
    }


def opensearch_py(url: str, gzip: bool, managed: str, dim: int) -> Iterator[Recorder]:
    from opensearchpy import OpenSearch, helpers

    rec = Recorder("opensearch-py")
    yield rec
    client = OpenSearch(hosts=[url], http_compress=gzip, timeout=300)
    index = "compat-py"
    client.indices.delete(index=f"{index}*", ignore=[404])
    mapping = {
        "properties": {
            "title": {"type": "text"},
            "tag": {"type": "keyword"},
            "n": {"type": "integer"},
            "v": {"type": "knn_vector", "dimension": DIM, "method": LUCENE_HNSW},
        }
    }
    faiss = {
        "properties": {
            "v": {
                "type": "knn_vector",
                "dimension": DIM,
                "method": {**LUCENE_HNSW, "engine": "faiss"},
            }
        }
    }
    knn = {"index.knn": True}
    rec.step(
        "create",
        lambda: client.indices.create(index=index, body={"settings": knn, "mappings": mapping}),
    )
    rec.step(
        "create faiss",
        lambda: client.indices.create(
            index=f"{index}-faiss", body={"settings": knn, "mappings": faiss}
        ),
    )
    actions = [
        {"_index": index, "_id": d["id"], "_source": {k: v for k, v in d.items() if k != "id"}}
        for d in DOCS
    ]
    rec.step("bulk", lambda: helpers.bulk(client, actions, refresh=True))
    rec.step("get", lambda: client.get(index=index, id="3"))
    match = {"query": {"match": {"title": "alpha"}}}
    rec.step("search", lambda: client.search(index=index, body=match))
    by_n = {"query": {"match_all": {}}, "sort": [{"n": "asc"}]}
    rec.step("page in url", lambda: hit_ids(client.search(index=index, body=by_n, from_=4, size=3)))
    rec.step(
        "knn",
        lambda: hit_ids(
            client.search(
                index=index, body={"query": {"knn": {"v": {"vector": [1, 0, 0], "k": 3}}}}
            )
        ),
    )
    aggs = {
        "size": 0,
        "aggs": {"tags": {"terms": {"field": "tag"}}, "mean": {"avg": {"field": "n"}}},
    }
    rec.step("aggregations", lambda: client.search(index=index, body=aggs))
    rec.step("count", lambda: client.count(index=index, body={"query": {"term": {"tag": "even"}}}))
    multi = [{"index": index}, match, {"index": [index], "request_cache": True}, {"size": 0}]
    rec.step("msearch", lambda: client.msearch(body=multi))
    rec.step(
        "update",
        lambda: client.update(index=index, id="1", body={"doc": {"tag": "changed"}}, refresh=True),
    )
    rec.step(
        "delete_by_query",
        lambda: client.delete_by_query(
            index=index, body={"query": {"term": {"tag": "odd"}}}, refresh=True
        ),
    )

    def scrolled() -> list[str]:
        page = client.search(index=index, body=by_n, scroll="1m", size=2)
        ids = hit_ids(page)
        rest = client.scroll(scroll_id=page["_scroll_id"], scroll="1m")
        client.clear_scroll(scroll_id=rest["_scroll_id"])
        return ids + hit_ids(rest)

    rec.step("scroll", scrolled)
    rec.step("delete", lambda: client.delete(index=index, id="0", refresh=True))
    rec.step("count after", lambda: client.count(index=index))
    rec.step("drop", lambda: client.indices.delete(index=index))
    body = {"query": {"match": {"text": MANAGED_QUERY}}, "size": 3}
    params = {"kgqr.explain": "true"}
    rec.step(
        "kgqr params",
        lambda: explained(client.search(index=managed, body=body, params=params)),
        managed=True,
    )
    ext = {**body, "ext": {"kgqr": {"strategy": "base", "explain": True}}}
    rec.step("ext.kgqr", lambda: explained(client.search(index=managed, body=ext)), managed=True)
    rec.step(
        "msearch kgqr",
        lambda: [
            explained(r)
            for r in client.msearch(body=[{"index": managed}, body], params=params)["responses"]
        ],
        managed=True,
    )


def opensearch_dsl(url: str, gzip: bool, managed: str, dim: int) -> Iterator[Recorder]:
    from opensearch_dsl import (
        Document,
        Integer,
        Keyword,
        MultiSearch,
        Search,
        Text,
        UpdateByQuery,
        connections,
    )
    from opensearch_dsl.faceted_search import FacetedSearch, TermsFacet

    rec = Recorder("opensearch-dsl")
    yield rec
    client = connections.create_connection(hosts=[url], http_compress=gzip, timeout=300)
    client.indices.delete(index="compat-dsl", ignore=[404])

    class Report(Document):  # type: ignore[misc]
        title = Text()
        tag = Keyword()
        n = Integer()

        class Index:
            name = "compat-dsl"

    class TagFacets(FacetedSearch):  # type: ignore[misc]
        index = "compat-dsl"
        fields = ["title"]  # noqa: RUF012 - the library's own pattern
        facets = {"tag": TermsFacet(field="tag")}  # noqa: RUF012

    rec.step("init", lambda: Report.init())

    def save_all() -> int:
        for d in DOCS:
            Report(meta={"id": d["id"]}, title=d["title"], tag=d["tag"], n=d["n"]).save()
        Report._index.refresh()
        return len(DOCS)

    rec.step("save", save_all)
    search = Report.search().query("match", title="alpha")
    rec.step("search", lambda: [h.meta.id for h in search.execute()])
    rec.step(
        "filter sort slice",
        lambda: [h.n for h in Report.search().filter("term", tag="even").sort("n")[2:4].execute()],
    )
    with_aggs = Report.search().extra(size=0)
    with_aggs.aggs.bucket("tags", "terms", field="tag").metric("top", "max", field="n")
    rec.step("aggregations", lambda: with_aggs.execute().aggregations.to_dict())
    rec.step("count", lambda: search.count())
    rec.step(
        "faceted",
        lambda: {k: list(v) for k, v in TagFacets("report").execute().facets.to_dict().items()},
    )
    multi = (
        MultiSearch(index="compat-dsl").add(search).add(Report.search().filter("term", tag="odd"))
    )
    rec.step("multisearch", lambda: [[h.meta.id for h in r] for r in multi.execute()])
    ubq = (
        UpdateByQuery(index="compat-dsl")
        .query("term", tag="even")
        .script(source="ctx._source.n += 100")
    )
    rec.step("update_by_query", lambda: ubq.params(refresh=True).execute().updated)
    rec.step(
        "delete by query",
        lambda: Report.search().query("term", tag="odd").params(refresh=True).delete().deleted,
    )
    rec.step("scan", lambda: sorted(int(h.meta.id) for h in Report.search().scan()))
    rec.step("get", lambda: Report.get(id="2").to_dict())
    rec.step("drop", lambda: Report._index.delete())
    managed_search = Search(index=managed).query("match", text=MANAGED_QUERY)[:3]
    rec.step(
        "ext.kgqr",
        lambda: explained(
            managed_search.extra(ext={"kgqr": {"explain": True}}).execute().to_dict()
        ),
        managed=True,
    )
    rec.step(
        "kgqr params",
        lambda: explained(
            managed_search.params(params={"kgqr.strategy": "base", "kgqr.explain": "true"})
            .execute()
            .to_dict()
        ),
        managed=True,
    )
    rec.step("count managed", lambda: managed_search.count(), managed=True)


def haystack(url: str, gzip: bool, managed: str, dim: int) -> Iterator[Recorder]:
    from haystack import Document as HaystackDocument
    from haystack_integrations.components.retrievers.opensearch import (
        OpenSearchBM25Retriever,
        OpenSearchEmbeddingRetriever,
    )
    from haystack_integrations.document_stores.opensearch import OpenSearchDocumentStore

    rec = Recorder("haystack")
    yield rec

    def store(index: str, **options: Any) -> OpenSearchDocumentStore:
        return OpenSearchDocumentStore(
            hosts=[url],
            index=index,
            embedding_dim=DIM,
            http_auth=None,
            http_compress=gzip,
            timeout=300,
            **options,
        )

    rec.step("default mapping (faiss)", lambda: store("compat-haystack-faiss").count_documents())
    docs = store(
        "compat-haystack", method={"space_type": "cosinesimil", "name": "hnsw", "engine": "lucene"}
    )
    rec.step("delete all (fresh)", lambda: docs.delete_all_documents())
    written = [
        HaystackDocument(
            id=d["id"], content=d["title"], embedding=d["v"], meta={"tag": d["tag"], "n": d["n"]}
        )
        for d in DOCS
    ]
    rec.step("write", lambda: docs.write_documents(written))
    rec.step("count", lambda: docs.count_documents())
    rec.step(
        "filter",
        lambda: sorted(
            d.id
            for d in docs.filter_documents({"field": "meta.tag", "operator": "==", "value": "even"})
        ),
    )
    rec.step(
        "bm25",
        lambda: [
            d.id
            for d in OpenSearchBM25Retriever(document_store=docs, top_k=3).run(query="alpha")[
                "documents"
            ]
        ],
    )
    rec.step(
        "embedding",
        lambda: [
            d.id
            for d in OpenSearchEmbeddingRetriever(document_store=docs, top_k=3).run(
                query_embedding=[1.0, 0.0, 0.0]
            )["documents"]
        ],
    )
    rec.step("delete ids", lambda: docs.delete_documents(["0", "1"]))
    rec.step(
        "delete by filter",
        lambda: docs.delete_by_filter(
            {"field": "meta.tag", "operator": "==", "value": "odd"}, refresh=True
        ),
    )
    rec.step("count after", lambda: docs.count_documents())
    rec.step("delete all", lambda: docs.delete_all_documents())
    kb = OpenSearchDocumentStore(
        hosts=[url],
        index=managed,
        embedding_dim=dim,
        http_auth=None,
        http_compress=gzip,
        timeout=300,
        create_index=False,
    )
    rec.step(
        "bm25 managed",
        lambda: len(
            OpenSearchBM25Retriever(document_store=kb, top_k=3).run(query=MANAGED_QUERY)[
                "documents"
            ]
        ),
        managed=True,
    )
    custom = {
        "query": {"match": {"text": "$query"}},
        "size": 3,
        "ext": {"kgqr": {"strategy": "base"}},
    }
    rec.step(
        "ext.kgqr custom query",
        lambda: len(
            OpenSearchBM25Retriever(document_store=kb, custom_query=custom).run(
                query=MANAGED_QUERY
            )["documents"]
        ),
        managed=True,
    )


def llamaindex(url: str, gzip: bool, managed: str, dim: int) -> Iterator[Recorder]:
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores.types import (
        MetadataFilter,
        MetadataFilters,
        VectorStoreQuery,
        VectorStoreQueryMode,
    )
    from llama_index.vector_stores.opensearch import OpensearchVectorClient, OpensearchVectorStore

    rec = Recorder("llamaindex")
    yield rec
    options = {"http_compress": gzip, "timeout": 300}
    default = OpensearchVectorStore(
        OpensearchVectorClient(url, "compat-llama-faiss", DIM, **options)
    )
    rec.step(
        "default mapping (faiss)",
        lambda: default.add([TextNode(id_="x", text="x", embedding=[1.0, 0.0, 0.0])]),
    )
    store = OpensearchVectorStore(
        OpensearchVectorClient(url, "compat-llama", DIM, engine="lucene", **options)
    )
    rec.step("clear (fresh)", lambda: store.clear())
    nodes = [
        TextNode(
            id_=f"node-{d['id']}",
            text=d["title"],
            embedding=d["v"],
            metadata={"tag": d["tag"], "n": d["n"]},
        )
        for d in DOCS
    ]
    for node, d in zip(nodes, DOCS, strict=True):
        node.relationships = {}
        node.metadata["doc_id"] = f"doc-{int(d['id']) % 3}"
    rec.step("add", lambda: store.add(nodes))
    rec.step("refresh", lambda: store.client._os_client.indices.refresh(index="compat-llama"))
    rec.step(
        "query",
        lambda: (
            store.query(VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0], similarity_top_k=3)).ids
        ),
    )
    even = MetadataFilters(filters=[MetadataFilter(key="tag", value="even")])
    rec.step(
        "query filtered",
        lambda: (
            store.query(
                VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0], similarity_top_k=3, filters=even)
            ).ids
        ),
    )
    rec.step(
        "text search",
        lambda: (
            store.query(
                VectorStoreQuery(
                    query_str="alpha", mode=VectorStoreQueryMode.TEXT_SEARCH, similarity_top_k=3
                )
            ).ids
        ),
    )
    rec.step("delete nodes", lambda: store.delete_nodes(node_ids=["node-0", "node-1"]))
    rec.step("refresh again", lambda: store.client._os_client.indices.refresh(index="compat-llama"))
    rec.step(
        "query after",
        lambda: (
            store.query(VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0], similarity_top_k=12)).ids
        ),
    )
    rec.step("clear", lambda: store.clear())
    kb = OpensearchVectorStore(
        OpensearchVectorClient(
            url,
            managed,
            dim,
            embedding_field="vector",
            text_field="text",
            engine="lucene",
            **options,
        )
    )
    rec.step(
        "text search managed",
        lambda: len(
            kb.query(
                VectorStoreQuery(
                    query_str=MANAGED_QUERY,
                    mode=VectorStoreQueryMode.TEXT_SEARCH,
                    similarity_top_k=3,
                )
            ).ids
        ),
        managed=True,
    )
    rec.step(
        "vector search managed",
        lambda: len(
            kb.query(
                VectorStoreQuery(query_embedding=vector_of(MANAGED_QUERY, dim), similarity_top_k=3)
            ).ids
        ),
        managed=True,
    )


def langchain(url: str, gzip: bool, managed: str, dim: int) -> Iterator[Recorder]:
    import warnings

    from langchain_core.embeddings import Embeddings

    warnings.simplefilter("ignore", DeprecationWarning)
    from langchain_community.vectorstores import OpenSearchVectorSearch

    class StandInEmbeddings(Embeddings):
        def __init__(self, size: int) -> None:
            self.size = size

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [self.embed_query(text) for text in texts]

        def embed_query(self, text: str) -> list[float]:
            known = next((d["v"] for d in DOCS if d["title"] == text), None)
            return known if known and self.size == DIM else vector_of(text, self.size)

    rec = Recorder("langchain")
    yield rec
    options = {"http_compress": gzip, "timeout": 300}
    texts = [d["title"] for d in DOCS]
    metadatas = [{"tag": d["tag"], "n": d["n"]} for d in DOCS]
    ids = [d["id"] for d in DOCS]
    default = OpenSearchVectorSearch(
        url, "compat-langchain-nmslib", StandInEmbeddings(DIM), **options
    )
    rec.step("default mapping (nmslib)", lambda: default.add_texts(texts[:1], ids=ids[:1]))
    store = OpenSearchVectorSearch(url, "compat-langchain", StandInEmbeddings(DIM), **options)
    rec.step("drop (fresh)", lambda: store.delete_index() if store.index_exists() else None)
    rec.step(
        "add",
        lambda: store.add_texts(
            texts, metadatas=metadatas, ids=ids, engine="lucene", refresh_indices=True
        ),
    )
    rec.step(
        "similarity",
        lambda: [d.page_content for d in store.similarity_search("alpha report 0", k=3)],
    )
    rec.step(
        "with score",
        lambda: [
            (d.page_content, s) for d, s in store.similarity_search_with_score("beta report 1", k=2)
        ],
    )
    rec.step(
        "filtered",
        lambda: [
            d.metadata["n"]
            for d in store.similarity_search(
                "alpha report 0", k=3, efficient_filter={"term": {"metadata.tag": "even"}}
            )
        ],
    )
    rec.step(
        "script scoring",
        lambda: [
            d.page_content
            for d in store.similarity_search("gamma report 2", k=3, search_type="script_scoring")
        ],
    )
    rec.step("delete", lambda: store.delete(ids=["0", "1"], refresh_indices=True))
    rec.step("drop", lambda: store.delete_index())
    kb = OpenSearchVectorSearch(url, managed, StandInEmbeddings(dim), **options)
    fields = {"vector_field": "vector", "text_field": "text"}
    rec.step(
        "similarity managed",
        lambda: len(kb.similarity_search(MANAGED_QUERY, k=3, **fields)),
        managed=True,
    )


CLIENTS = {
    "opensearch-py": opensearch_py,
    "opensearch-dsl": opensearch_dsl,
    "haystack": haystack,
    "llamaindex": llamaindex,
    "langchain": langchain,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--managed-index", required=True)
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--out", required=True)
    parser.add_argument("--gzip", action="store_true", help="clients compress request bodies")
    parser.add_argument("--client", action="append", choices=sorted(CLIENTS))
    args = parser.parse_args()
    steps: list[dict[str, Any]] = []
    for name in args.client or CLIENTS:
        scenario = CLIENTS[name](args.url, args.gzip, args.managed_index, args.dimension)
        recorder = next(scenario)
        try:
            next(scenario, None)
        except Exception as exc:
            recorder.steps.append(
                {
                    "client": name,
                    "step": "setup",
                    "managed": False,
                    "error": error_of(exc),
                    "detail": repr(exc)[-400:],
                }
            )
        steps += recorder.steps
    with open(args.out, "w") as out:
        json.dump(steps, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
