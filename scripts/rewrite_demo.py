"""Quickstart's last step: searches through the kgqr proxy with an unmodified
opensearch-py client, printing each rewrite's explanation and the top hits."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opensearchpy import OpenSearch

DEMOS = [
    ("movies", "base", "professional bank robbers chased by the police"),
    ("movies", "base", "Tom Cruise hitman"),
    ("movies", "graph", "Tom Cruise hitman"),
    ("movies", "hyde", "which director made films with Al Pacino?"),
    ("movies", "kar+boost", "which director made films with Al Pacino?"),
    ("musique-sample", "hyde", "Who publishes the Journal of Mathematical Physics?"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--proxy", default="http://127.0.0.1:9201")
    args = parser.parse_args()
    client = OpenSearch(hosts=[args.proxy], timeout=300)  # just another OpenSearch URL
    for kb, strategy, text in DEMOS:
        index = f"kgqr-{kb}-documents"
        if not client.indices.exists(index=index):
            print(f"(skipping {kb}: not ingested)")
            continue
        result = client.search(
            index=index,
            body={"query": {"match": {"text": text}}, "size": 3, "_source": ["title"]},
            params={"kgqr.strategy": strategy, "kgqr.explain": "true"},
        )
        explain = result["kgqr"]
        print(f"\n== [{kb}] {strategy}: {text}")
        print(f"   stages ms: {json.dumps(explain['stages_ms'])}  fallback: {explain['fallback']}")
        for neighbour in explain["details"].get("neighbours", [])[:4]:
            print(
                f"   graph: {neighbour['title']} via {neighbour['relation']} "
                f"(DRF {neighbour['score']:.2f})"
            )
        nodes = explain["details"].get("graph_nodes", [])[:4]
        if nodes:
            found = ", ".join(f"{node['id']} {node['score']:.2f}" for node in nodes)
            first = explain["details"]["kept_first"]
            print(f"   graph (no LLM), from the first hit {first}: {found}")
            for node in nodes:
                if node.get("path"):
                    print(f"     lifted by {node['path']}")
        for expansion in explain["expansions"]:
            print(f"   + {expansion[:140]}")
        for rank, hit in enumerate(result["hits"]["hits"], start=1):
            print(f"   {rank}. {hit['_source']['title']}  ({hit['_score']:.3f})")


if __name__ == "__main__":
    main()
