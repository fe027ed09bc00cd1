"""The retrievers of LangChain, Haystack and LlamaIndex, unmodified, against one URL:
write a corpus into an index with the client's own calls and default field names, or run
its own retriever call for each query and record the ids it returns, in order.

Runs in the clients' venv (scripts/compat_venv.sh). Vectors come with the corpus and the
queries (made by kgqr's embedder in kgqr's venv): the clients take a vector as they take
one from any embedding model; what is tested is what the URL they point at returns.

    python retriever_calls.py write CLIENT --url URL --index NAME --docs DOCS.jsonl
    python retriever_calls.py search CLIENT --url URL --index NAME --queries Q.jsonl \
        --k K --out RANKED.jsonl

DOCS lines: {"id", "title", "text", "vector"}; Q lines: {"id", "vector"}; RANKED lines:
{"id", "ranked": [document ids]}.
"""

from __future__ import annotations

import argparse
import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

LUCENE = {"name": "hnsw", "space_type": "cosinesimil", "engine": "lucene"}
BATCH = 500


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    with path.open() as stream:
        for line in stream:
            if line.strip():
                yield json.loads(line)


def _batches(path: Path) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for doc in _lines(path):
        batch.append(doc)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


class LangChain:
    """OpenSearchVectorSearch: `text`, `vector_field`, `metadata`; its ids are the ids given."""

    def __init__(self, url: str, index: str, dim: int) -> None:
        from langchain_core.embeddings import Embeddings

        warnings.simplefilter("ignore", DeprecationWarning)
        from langchain_community.vectorstores import OpenSearchVectorSearch

        class GivenVectors(Embeddings):  # the vectors come with the data
            def embed_documents(self, texts: list[str]) -> list[list[float]]:
                raise NotImplementedError

            def embed_query(self, text: str) -> list[float]:
                raise NotImplementedError

        self.store = OpenSearchVectorSearch(url, index, GivenVectors(), timeout=300)

    def write(self, docs: list[dict[str, Any]]) -> None:
        self.store.add_embeddings(
            [(d["text"], d["vector"]) for d in docs],
            metadatas=[{"title": d["title"]} for d in docs],
            ids=[d["id"] for d in docs],
            engine="lucene",
            space_type="cosinesimil",
            refresh_indices=True,
        )

    def search(self, vector: list[float], k: int) -> list[str]:
        # Its ids are not among what it returns: the _id of each hit, as it searched.
        found = self.store.similarity_search_by_vector(vector, k=k)
        return [str(d.id) for d in found]


class Haystack:
    """OpenSearchDocumentStore: `content`, `embedding`, meta fields at the top level."""

    def __init__(self, url: str, index: str, dim: int) -> None:
        from haystack_integrations.document_stores.opensearch import OpenSearchDocumentStore

        self.store = OpenSearchDocumentStore(
            hosts=[url], index=index, embedding_dim=dim, method=LUCENE, timeout=300
        )

    def write(self, docs: list[dict[str, Any]]) -> None:
        from haystack import Document

        self.store.write_documents(
            [
                Document(
                    id=d["id"], content=d["text"], embedding=d["vector"], meta={"title": d["title"]}
                )
                for d in docs
            ]
        )

    def search(self, vector: list[float], k: int) -> list[str]:
        from haystack_integrations.components.retrievers.opensearch import (
            OpenSearchEmbeddingRetriever,
        )

        retriever = OpenSearchEmbeddingRetriever(document_store=self.store, top_k=k)
        return [str(d.id) for d in retriever.run(query_embedding=vector)["documents"]]


class LlamaIndex:
    """OpensearchVectorStore: `content`, `embedding`, `metadata`; node ids as `_id`."""

    def __init__(self, url: str, index: str, dim: int) -> None:
        from llama_index.vector_stores.opensearch import (
            OpensearchVectorClient,
            OpensearchVectorStore,
        )

        client = OpensearchVectorClient(url, index, dim, engine="lucene", timeout=300)
        self.store = OpensearchVectorStore(client)

    def write(self, docs: list[dict[str, Any]]) -> None:
        from llama_index.core.schema import TextNode

        nodes = [
            TextNode(
                id_=d["id"], text=d["text"], embedding=d["vector"], metadata={"title": d["title"]}
            )
            for d in docs
        ]
        self.store.add(nodes)

    def search(self, vector: list[float], k: int) -> list[str]:
        from llama_index.core.vector_stores.types import VectorStoreQuery

        found = self.store.query(VectorStoreQuery(query_embedding=vector, similarity_top_k=k))
        return [str(node_id) for node_id in found.ids or []]


CLIENTS: dict[str, Callable[[str, str, int], Any]] = {
    "langchain": LangChain,
    "haystack": Haystack,
    "llamaindex": LlamaIndex,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["write", "search"])
    parser.add_argument("client", choices=sorted(CLIENTS))
    parser.add_argument("--url", required=True)
    parser.add_argument("--index", required=True)
    parser.add_argument("--docs", type=Path)
    parser.add_argument("--queries", type=Path)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    client = CLIENTS[args.client](args.url, args.index, args.dim)
    if args.action == "write":
        for batch in _batches(args.docs):
            client.write(batch)
        return
    with args.out.open("w") as out:
        for query in _lines(args.queries):
            ranked = client.search(query["vector"], args.k)
            out.write(json.dumps({"id": query["id"], "ranked": ranked}) + "\n")


if __name__ == "__main__":
    main()
