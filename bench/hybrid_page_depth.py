"""What reading every hybrid sub-query to one depth costs the engine.

kgqr sets `pagination_depth` = max(k-NN k, from + size) on every page, so pages of one
search join up into one ranking; the engine's default reads from + size per sub-query. This
sends each dev question's final `base` query (learnt through the proxy's explain) straight
to OpenSearch both ways, interleaved, and prints the p50s and their ratio. Needs the KB.

    python -m bench.hybrid_page_depth --kb musique --queries musique:../shared/data/musique100
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_common import proxy_process, save
from bench.proxy_latency import timed_post
from kgqr_core.settings import get_settings
from plugin import schema
from query_rewriter.engine.hybrid_query import search_params
from workbench.evaluation.query_sets import load_query_set


def final_queries(
    client: httpx.Client, proxy: str, index: str, texts: list[str], size: int
) -> list[dict]:
    bodies = []
    for text in texts:
        response = client.post(
            f"{proxy}/{index}/_search",
            json={"query": {"match": {"text": text}}, "size": size},
            params={"kgqr.strategy": "base", "kgqr.explain": "true"},
        )
        bodies.append(response.raise_for_status().json()["kgqr"]["final_query"])
    return bodies


def without_depth(body: dict) -> dict:
    hybrid = {k: v for k, v in body["query"]["hybrid"].items() if k != "pagination_depth"}
    return {**body, "query": {"hybrid": hybrid}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb", default="musique", help="knowledge base to search")
    parser.add_argument("--queries", default="musique:../shared/data/musique100",
                        help="query set KIND:PATH whose questions are searched")  # fmt: skip
    parser.add_argument("--size", type=int, default=20, help="page size (eval's default)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    direct = get_settings().opensearch.url
    index = schema.documents_index(args.kb)
    texts = [query.text for query in load_query_set(args.queries)]
    latencies: dict[str, list[float]] = {"one depth": [], "from + size": []}
    with proxy_process() as proxy, httpx.Client(timeout=120) as client:
        bodies = final_queries(client, proxy.url, index, texts, args.size)
        for _ in range(args.rounds):
            for body in bodies:
                for name, sent in (("one depth", body), ("from + size", without_depth(body))):
                    url = f"{direct}/{index}/_search"
                    latencies[name].append(timed_post(client, url, sent, search_params({}, sent)))
    p50 = {name: statistics.median(values) for name, values in latencies.items()}
    ratio = p50["one depth"] / p50["from + size"]
    depth = bodies[0]["query"]["hybrid"]["pagination_depth"]
    print(f"hybrid search, size {args.size}, {len(bodies)} questions x {args.rounds}: "
          f"pagination_depth {depth} p50 {p50['one depth']:.2f} ms vs from + size "
          f"{p50['from + size']:.2f} ms, ratio {ratio:.2f}")  # fmt: skip
    save("hybrid_page_depth", {"kb": args.kb, "size": args.size, "depth": depth,
                               "questions": len(bodies), "rounds": args.rounds,
                               "p50_ms": p50, "p50_ratio": ratio})  # fmt: skip


if __name__ == "__main__":
    main()
