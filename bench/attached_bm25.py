"""An index with no vectors at all (BM25 only, written with opensearch-py in its own
mapping), attached with the corpus's graph: its own `match` search directly, and through
kgqr with `graph` and `graph_walk` (BM25 and the graph only), on a corpus's dev questions.

    python -m bench.attached_bm25 --corpus hotpotqa:../shared/data/hotpotqa100
    python -m bench.attached_bm25 --corpus musique:../shared/data/musique100
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from opensearchpy import helpers

from bench.attached_retrievers import KGQR, corpus_files, run_kgqr, scores_of
from bench.bench_common import proxy_process, save
from kgqr_core import connections
from kgqr_core.settings import get_settings
from query_rewriter.search.kb_indices import MISS_TTL_S
from workbench.evaluation.query_sets import load_query_set

STRATEGIES = ("base", "graph", "graph_walk")
MAPPING = {"properties": {"title": {"type": "text"}, "body": {"type": "text"}}}


def _ranked(url: str, index: str, text: str, k: int, strategy: str | None) -> list[str]:
    body: dict[str, Any] = {"size": k, "_source": False, "query": {"match": {"body": text}}}
    params = {"kgqr.strategy": strategy} if strategy else {}
    answer = httpx.post(f"{url}/{index}/_search", params=params, json=body, timeout=300).json()
    return [hit["_id"] for hit in answer["hits"]["hits"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--questions", type=int, default=50)
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args()
    settings = get_settings()
    kind = args.corpus.partition(":")[0]
    index = kb = f"bench-bm25-{kind}"
    judged_queries = load_query_set(args.corpus, "dev", args.questions)
    judged = {q.id: q.judgments for q in judged_queries}
    opensearch = connections.opensearch_client(settings)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp, proxy_process() as proxy:
        docs, relations, count = corpus_files(args.corpus, Path(tmp), settings.embedder.model)
        opensearch.indices.delete(index=index, ignore=[404])
        opensearch.indices.create(index=index, body={"mappings": MAPPING})
        lines = map(json.loads, docs.read_text().splitlines())
        actions = ({"_index": index, "_id": d["id"], "title": d["title"], "body": d["text"]}
                   for d in lines)  # fmt: skip
        helpers.bulk(opensearch, actions, refresh=True)
        try:
            run_kgqr("kb", "attach", kb, "--index", index, "--no-vectors", "--text", "title^2",
                  "--text", "body")  # fmt: skip
            run_kgqr("kb", "graph", kb, "--relations", str(relations))
            time.sleep(MISS_TTL_S + 1)
            direct = {q.id: _ranked(settings.opensearch.url, index, q.text, args.k, None)
                      for q in judged_queries}  # fmt: skip
            rows["BM25 (direct)"] = scores_of(direct, judged)
            for strategy in STRATEGIES:
                ranked = {q.id: _ranked(proxy.url, index, q.text, args.k, strategy)
                          for q in judged_queries}  # fmt: skip
                rows[f"{strategy} through kgqr"] = scores_of(ranked, judged)
        finally:
            subprocess.run([*KGQR, "kb", "detach", kb, "--yes"], capture_output=True)
            opensearch.indices.delete(index=index, ignore=[404])
    print(f"\n{count} passages, {len(judged)} questions, top {args.k}, no vectors")
    print(f"{'search':<28} {'R@5':>6} {'MRR':>6}")
    for name, scores in rows.items():
        print(f"{name:<28} {scores['R@5']:>6} {scores['MRR']:>6}")
    save(f"attached-bm25-{kind}", {"corpus": args.corpus, "questions": len(judged),
                                   "k": args.k, "rows": rows})  # fmt: skip


if __name__ == "__main__":
    main()
