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

musique="$repo/../shared/data/musique100"
if [ -d "$musique" ]; then
  echo "== ingest: 200 MuSiQue passages with their third-party OpenIE graph"
  kgqr ingest "musique:$musique" --kb musique-sample --limit 200
  kgqr ingest verify --kb musique-sample
else
  echo "(../shared/data/musique100 not found: skipping the MuSiQue sample)"
fi
