#!/usr/bin/env bash
# README command 1: from nothing to a working kgqr on this machine.
# Sets up the Python environment, starts OpenSearch, Neo4j, Redis and the local LLM
# (downloaded and cached on first use), and runs the main job on a small sample.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=$(bash "$repo/scripts/bootstrap.sh" | tail -n 1)
export PATH="$bin:$PATH" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
cd "$repo"

kgqr services up
kgqr services check

echo "== ingest: a small movie knowledge base (documents + typed relations)"
kgqr ingest "jsonl:tests/fixtures/tiny_kb" --kb movies
kgqr ingest verify --kb movies

# The benchmark data, where there is some: KGQR_DATA_DIR, else a shared/data beside the checkout.
musique="${KGQR_DATA_DIR:-$repo/../shared/data}/musique100"
if [ -d "$musique" ]; then
  echo "== ingest: 200 MuSiQue passages with their third-party OpenIE graph"
  kgqr ingest "musique:$musique" --kb musique-sample --limit 200
  kgqr ingest verify --kb musique-sample
else
  echo "($musique not found: skipping the MuSiQue sample; set KGQR_DATA_DIR)"
fi

echo "== rewrite: searches through the kgqr proxy (kgqr serve on 127.0.0.1:9201, its nginx front on 9202)"
KGQR_GRAPH_SNAPSHOT_PRELOAD='*' kgqr serve --port 9201 --front-port 9202 --log-level WARNING &
proxy_pid=$!
trap 'kill $proxy_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  curl -fs http://127.0.0.1:9201/_kgqr/metrics >/dev/null 2>&1 && break
  sleep 0.5
done
python scripts/rewrite_demo.py --proxy http://127.0.0.1:9202

echo "== evaluate: two strategies on three judged movie queries (kgqr eval)"
kgqr eval "jsonl:tests/fixtures/movie_judgments.jsonl" --kb movies --strategies base,hyde \
  --proxy http://127.0.0.1:9202 --out eval-results/quickstart-movies
echo "== next: in any shell, \`kgqr serve --front-port 9202\` (kgqr is in ~/.local/bin), then open"
echo "   http://127.0.0.1:9201/_kgqr/tune to compare strategies and judge hits; \`kgqr --help\` for the rest"
