#!/usr/bin/env bash
# README command 1: from nothing to a working kgqr on this machine.
# Sets up the Python environment, starts OpenSearch, Neo4j, Redis and the local LLM
# (downloaded and cached on first use), and runs the main job on a small sample.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=$(bash "$repo/scripts/bootstrap.sh" | tail -n 1)
export PATH="$bin:$PATH" HF_HUB_OFFLINE=1

kgqr services up
kgqr services check
