"""An index with no vectors at all (BM25 only, written with opensearch-py in its own
mapping), attached with the corpus's graph: its own `match` search directly, and through
kgqr with `graph` and `graph_walk` (BM25 and the graph only), on a corpus's dev questions.
Then `kgqr kb embed` gives it kgqr's own vectors (a side index; KGQR_EMBEDDER_MODEL) and
the same strategies run again. Each row is compared with the direct search per question:
the paired difference, its 95% bootstrap interval, a randomization p-value, wins/losses.

The graph comes from a relations file, or with `--graph-from fields` from the index's own
structured fields: the same edges written into each document as a team's index keeps
them, a keyword field of the entities it mentions (`mentions`) and one of the documents
it links to (`links`), attached as entity and reference fields and read by
`kgqr kb graph --from-fields`.

    python -m bench.attached_bm25 --corpus hotpotqa:../shared/data/hotpotqa100
    python -m bench.attached_bm25 --corpus musique:../shared/data/musique100 --graph-from fields
"""

from __future__ import annotations

import argparse
import json
import statistics
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
from workbench.evaluation.cross_validation import Candidate, PerQuery, cross_validate
from workbench.evaluation.metrics import score_query
from workbench.evaluation.query_sets import load_query_set
from workbench.evaluation.significance import compare, compare_runs

STRATEGIES = ("base", "graph", "graph_walk")
MAPPING = {"properties": {"title": {"type": "text"}, "body": {"type": "text"}}}
# The graph as structured fields: what a document mentions, and which documents it links to.
FIELDS_MAPPING = {"properties": {**MAPPING["properties"], "mentions": {"type": "keyword"},
                                 "links": {"type": "keyword"}}}  # fmt: skip


LATENCY_MS: list[float] = []  # the searches of the row being run


def _ranked(url: str, index: str, text: str, k: int, strategy: str | None) -> list[str]:
    body: dict[str, Any] = {"size": k, "_source": False, "query": {"match": {"body": text}}}
    params = {"kgqr.strategy": strategy} if strategy else {}
    started = time.perf_counter()
    answer = httpx.post(f"{url}/{index}/_search", params=params, json=body, timeout=300).json()
    LATENCY_MS.append(1000 * (time.perf_counter() - started))
    return [hit["_id"] for hit in answer["hits"]["hits"]]


def _edges_as_fields(relations: Path) -> dict[str, dict[str, list[str]]]:
    """Each document's edges as the fields a team's index would keep them in: the
    entities it mentions, the documents it links to."""
    fields: dict[str, dict[str, dict[str, None]]] = {}
    for line in relations.read_text().splitlines():
        edge = json.loads(line)
        named = ("mentions", edge["entity"]) if "entity" in edge else ("links", edge["target"])
        fields.setdefault(edge["source"], {}).setdefault(named[0], {})[named[1]] = None
    return {doc: {name: list(values) for name, values in held.items()}
            for doc, held in fields.items()}  # fmt: skip


def depth_chosen_on_folds(runs: dict[str, PerQuery]) -> list[dict[str, Any]]:
    """The depth each of 5 folds picks on the other four (by R@5, the shallowest first
    on a tie), scored on its own questions, against the shallowest depth."""
    if len(runs) < 2:
        return []
    names = list(runs)
    cv = cross_validate([Candidate(name, runs[name]) for name in names], "R@5")
    found = []
    for metric in ("R@5", "MRR"):
        held_out = {query: scores[metric] for query, scores in cv.per_query.items()}
        shallowest = {query: scores[metric] for query, scores in runs[names[0]].items()}
        comparison = compare(metric, "depth chosen on folds", held_out, names[0], shallowest)
        text = (f"depth chosen on folds {cv.chosen()} against {names[0]}, {metric}: "
                f"{comparison.as_text()}")  # fmt: skip
        found.append({**comparison.as_json(), "chosen": cv.chosen(), "text": text})
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--questions", type=int, default=50)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument(
        "--depths", default="", help="side_vector_depth values to compare (default: the setting's)"
    )
    parser.add_argument(
        "--graph-from", choices=("relations", "fields"), default="relations",
        help="build the graph from a relations file, or from the index's own keyword fields",
    )  # fmt: skip
    parser.add_argument(
        "--no-side-vectors", action="store_true", help="skip `kgqr kb embed` and its rows"
    )
    args = parser.parse_args()
    settings = get_settings()
    kind = args.corpus.partition(":")[0]
    index = kb = f"bench-bm25-{kind}"
    judged_queries = load_query_set(args.corpus, "dev", args.questions)
    judged = {q.id: q.judgments for q in judged_queries}
    opensearch = connections.opensearch_client(settings)
    rows, per_query = {}, {}

    def record(name: str, ranked: dict[str, list[str]]) -> None:
        rows[name] = {**scores_of(ranked, judged),
                      "p50_ms": round(statistics.median(LATENCY_MS), 1)}  # fmt: skip
        LATENCY_MS.clear()
        per_query[name] = {qid: score_query(ranked.get(qid, []), grades)
                           for qid, grades in judged.items()}  # fmt: skip

    with tempfile.TemporaryDirectory() as tmp:
        docs, relations, count = corpus_files(args.corpus, Path(tmp), settings.embedder.model)
        as_fields = args.graph_from == "fields"
        linked = _edges_as_fields(relations) if as_fields else {}
        opensearch.indices.delete(index=index, ignore=[404])
        opensearch.indices.create(
            index=index, body={"mappings": FIELDS_MAPPING if as_fields else MAPPING}
        )
        lines = map(json.loads, docs.read_text().splitlines())
        actions = ({"_index": index, "_id": d["id"], "title": d["title"], "body": d["text"],
                    **linked.get(d["id"], {})} for d in lines)  # fmt: skip
        helpers.bulk(opensearch, actions, refresh=True)
        try:
            graph_fields = ["--entity-field", "mentions", "--reference-field", "links"]
            run_kgqr("kb", "attach", kb, "--index", index, "--no-vectors", "--text", "title^2",
                     "--text", "body", *(graph_fields if as_fields else []))  # fmt: skip
            source = ["--from-fields"] if as_fields else ["--relations", str(relations)]
            run_kgqr("kb", "graph", kb, *source)
            record(
                "BM25 (direct)",
                {
                    q.id: _ranked(settings.opensearch.url, index, q.text, args.k, None)
                    for q in judged_queries
                },
            )

            def through_kgqr(suffix: str, env: dict[str, str]) -> None:
                with proxy_process(env) as proxy:  # each reads the KB's meta afresh
                    time.sleep(MISS_TTL_S + 1)
                    for strategy in STRATEGIES:
                        record(f"{strategy}{suffix}", {
                            q.id: _ranked(proxy.url, index, q.text, args.k, strategy)
                            for q in judged_queries})  # fmt: skip

            through_kgqr("", {})
            if not args.no_side_vectors:
                run_kgqr("kb", "embed", kb, "--field", "title", "--field", "body")
            depths: list[int | None] = [int(d) for d in args.depths.split(",") if d]
            for depth in [] if args.no_side_vectors else depths or [None]:
                suffix = " + kgqr's vectors" + (f" (top {depth})" if depth else "")
                env = {"KGQR_REWRITE_SIDE_VECTOR_DEPTH": str(depth)} if depth else {}
                through_kgqr(suffix, env)
        finally:
            subprocess.run([*KGQR, "kb", "detach", kb, "--yes"], capture_output=True)
            opensearch.indices.delete(index=index, ignore=[404])
    compared = compare_runs(per_query, "BM25 (direct)", ["R@5", "MRR"])
    against = {(c.strategy, c.metric): c.as_text() for c in compared}
    print(
        f"\n{count} passages, {len(judged)} questions, top {args.k}, an index without vectors, "
        f"its graph from {'its own fields' if as_fields else 'a relations file'}"
    )
    print(f"{'search (through kgqr)':<38} {'R@5':>6} {'MRR':>6} {'p50 ms':>7}   against direct")
    for name, scores in rows.items():
        print(
            f"{name:<38} {scores['R@5']:>6} {scores['MRR']:>6} {scores['p50_ms']:>7}   "
            f"R@5 {against.get((name, 'R@5'), '-')}; MRR {against.get((name, 'MRR'), '-')}"
        )
    # Each depth of kgqr's vectors against the shallowest: what reading deeper adds.
    embedded = [name for name in per_query if name.startswith("base + ")]
    by_depth = compare_runs({name: per_query[name] for name in embedded}, embedded[0],
                            ["R@5", "MRR"]) if len(embedded) > 1 else []  # fmt: skip
    for deeper in by_depth:
        print(f"{deeper.strategy} against {deeper.baseline}, {deeper.metric}: {deeper.as_text()}")
    chosen = depth_chosen_on_folds({name: per_query[name] for name in embedded})
    for line in chosen:
        print(line["text"])
    save(f"attached-bm25-{kind}" + ("-fields" if as_fields else ""), {
        "corpus": args.corpus, "questions": len(judged), "k": args.k,
        "graph_from": args.graph_from,
        "model": settings.embedder.model, "rows": rows,
        "against_direct": [c.as_json() for c in compared],
        "deeper_against_shallowest": [c.as_json() for c in by_depth],
        "depth_chosen_on_folds": chosen,
        "per_query": per_query,
    })  # fmt: skip


if __name__ == "__main__":
    main()
