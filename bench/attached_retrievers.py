"""The retrievers of LangChain, Haystack and LlamaIndex over indices they built themselves,
directly and through kgqr (`graph` as the proxy's default strategy, only the URL changed),
scored on a corpus's dev questions; beside them, the same vector queries on kgqr's own KB
of the corpus, which the attached indices should match (same vectors, same graph).

    python -m bench.attached_retrievers --corpus hotpotqa:../shared/data/hotpotqa100
    python -m bench.attached_retrievers --corpus musique:../shared/data/musique100

Each client writes the corpus (vectors made here by kgqr's embedder, as ingest makes
them) with its own calls and default field names; kgqr attaches the index and builds its
graph from a relations file made from kgqr's own graph source of the corpus, keyed by the
same passage ids. Prints R@5 and MRR per path, and saves them in bench/results/.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.bench_common import REPO, proxy_process, save
from ingest.records import CorpusTriple, Document, Mention, Relation
from ingest.sources import open_source
from kgqr_core import connections
from kgqr_core.embedder import get_embedder
from kgqr_core.settings import get_settings
from plugin.schema import documents_index
from query_rewriter.search.kb_indices import MISS_TTL_S
from workbench.evaluation.metrics import mean_scores, score_query
from workbench.evaluation.query_sets import load_query_set

DRIVER = REPO / "tests" / "compat" / "retriever_calls.py"
CLIENTS = ("langchain", "haystack", "llamaindex")


def corpus_files(spec: str, folder: Path, model: str) -> tuple[Path, Path, int]:
    """docs.jsonl (id, title, text, vector) and relations.jsonl from the corpus's source:
    its relations as they are, a passage's mentions (and the ends of its triples) as edges
    to entities."""
    documents: list[Document] = []
    edges: list[dict[str, str]] = []
    for record in open_source(spec).records():
        if isinstance(record, Document):
            documents.append(record)
        elif isinstance(record, Relation):
            edges.append(
                {"source": record.source, "relation": record.type, "target": record.target}
            )
        elif isinstance(record, Mention):
            edges.append(
                {"source": record.passage_id, "relation": "mentions", "entity": record.entity}
            )
        elif isinstance(record, CorpusTriple):
            for entity in (record.head, record.tail):
                edges.append(
                    {"source": record.passage_id, "relation": "mentions", "entity": entity}
                )
    vectors = get_embedder(model).encode(
        [d.body() for d in documents], [d.title for d in documents]
    )
    docs = folder / "docs.jsonl"
    with docs.open("w") as out:
        for document, vector in zip(documents, vectors, strict=True):
            line = {"id": document.id, "title": document.title, "text": document.body(),
                    "vector": [round(float(x), 6) for x in vector]}  # fmt: skip
            out.write(json.dumps(line) + "\n")
    relations = folder / "relations.jsonl"
    relations.write_text("".join(json.dumps(edge) + "\n" for edge in edges))
    return docs, relations, len(documents)


KGQR = [sys.executable, "-c", "from kgqr_ops.cli import main; main()"]


def run_kgqr(*args: str) -> None:
    done = subprocess.run([*KGQR, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"kgqr {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


def _drive(python: str, *args: str) -> None:
    done = subprocess.run([python, str(DRIVER), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])


def _read_ranked(path: Path) -> dict[str, list[str]]:
    return {line["id"]: line["ranked"] for line in map(json.loads, path.read_text().splitlines())}


def _own_kb_ranked(
    url: str, index: str, queries: list[dict[str, Any]], k: int
) -> dict[str, list[str]]:
    """The same vector query on kgqr's own KB (field `vector`), with opensearch-py."""
    import httpx

    ranked = {}
    for query in queries:
        body = {"size": k, "_source": False,
                "query": {"knn": {"vector": {"vector": query["vector"], "k": k}}}}  # fmt: skip
        answer = httpx.post(f"{url}/{index}/_search", json=body, timeout=300).json()
        ranked[query["id"]] = [hit["_id"] for hit in answer["hits"]["hits"]]
    return ranked


def scores_of(
    ranked: dict[str, list[str]], judged: dict[str, dict[str, float]]
) -> dict[str, float]:
    per_query = [score_query(ranked.get(qid, []), grades) for qid, grades in judged.items()]
    means = mean_scores(per_query)
    return {"R@5": round(100 * means["R@5"], 1), "MRR": round(100 * means["MRR"], 1)}


def _paths(python: str, client: str, index: str, urls: dict[str, str], queries: Path,
           k: int, folder: Path) -> Iterator[tuple[str, dict[str, list[str]]]]:  # fmt: skip
    for path, url in urls.items():
        out = folder / f"{client}-{path}.jsonl"
        _drive(python, "search", client, "--url", url, "--index", index,
               f"--queries={queries}", f"--k={k}", f"--out={out}")  # fmt: skip
        yield path, _read_ranked(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", required=True, help="hotpotqa:PATH or musique:PATH")
    parser.add_argument(
        "--kb", default=None, help="kgqr's own KB of the corpus (default: its kind)"
    )
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--questions", type=int, default=50)
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args()
    settings = get_settings()
    kind = args.corpus.partition(":")[0]
    own_kb = args.kb or kind
    venv = [str(REPO / "scripts" / "compat_venv.sh")]
    built = subprocess.run(["bash", *venv], check=True, capture_output=True, text=True)
    python = built.stdout.strip().splitlines()[-1]
    judged_queries = load_query_set(args.corpus, "dev", args.questions)
    judged = {q.id: q.judgments for q in judged_queries}
    query_vectors = get_embedder(settings.embedder.model).encode_queries(
        [q.text for q in judged_queries]
    )
    opensearch = connections.opensearch_client(settings)
    figures: dict[str, Any] = {"corpus": args.corpus, "questions": len(judged), "k": args.k,
                               "model": settings.embedder.model, "strategy": "graph"}  # fmt: skip
    rows: list[tuple[str, dict[str, float], dict[str, float]]] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        proxy_process({"KGQR_REWRITE_DEFAULT_STRATEGY": "graph"}) as proxy,
    ):
        folder = Path(tmp)
        started = time.perf_counter()
        docs, relations, count = corpus_files(args.corpus, folder, settings.embedder.model)
        print(f"{count} passages embedded in {time.perf_counter() - started:.0f}s", flush=True)
        queries = folder / "queries.jsonl"
        lines = [{"id": q.id, "vector": [round(float(x), 6) for x in v]}
                 for q, v in zip(judged_queries, query_vectors, strict=True)]  # fmt: skip
        queries.write_text("".join(json.dumps(line) + "\n" for line in lines))
        own_index = documents_index(own_kb)
        own = {
            "direct": _own_kb_ranked(settings.opensearch.url, own_index, lines, args.k),
            "kgqr": _own_kb_ranked(proxy.url, own_index, lines, args.k),
        }
        rows.append(("kgqr's own KB (opensearch-py knn)", scores_of(own["direct"], judged),
                     scores_of(own["kgqr"], judged)))  # fmt: skip
        for client in args.clients.split(","):
            index = kb = f"bench-{client}-{kind}"
            opensearch.indices.delete(index=index, ignore=[404])
            try:
                started = time.perf_counter()
                _drive(python, "write", client, "--url", settings.opensearch.url, "--index", index,
                       f"--docs={docs}")  # fmt: skip
                written = time.perf_counter() - started
                run_kgqr("kb", "attach", kb, "--index", index, "--model", settings.embedder.model)
                run_kgqr("kb", "graph", kb, "--relations", str(relations))
                time.sleep(MISS_TTL_S + 1)  # the proxy rereads attached indices this often
                urls = {"direct": settings.opensearch.url, "kgqr": proxy.url}
                ranked = dict(_paths(python, client, index, urls, queries, args.k, folder))
                rows.append(
                    (client, scores_of(ranked["direct"], judged), scores_of(ranked["kgqr"], judged))
                )
                figures[f"{client}_write_s"] = round(written, 1)
            finally:
                subprocess.run([*KGQR, "kb", "detach", kb, "--yes"], capture_output=True)
                opensearch.indices.delete(index=index, ignore=[404])
    print(f"\n{'retriever':<36} {'direct R@5':>10} {'MRR':>6} {'via kgqr R@5':>13} {'MRR':>6}")
    for name, direct, via in rows:
        print(f"{name:<36} {direct['R@5']:>10} {direct['MRR']:>6} {via['R@5']:>13} {via['MRR']:>6}")
    figures["rows"] = [{"retriever": name, "direct": d, "kgqr": v} for name, d, v in rows]
    save(f"attached-retrievers-{kind}", figures)


if __name__ == "__main__":
    main()
