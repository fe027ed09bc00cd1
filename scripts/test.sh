#!/usr/bin/env bash
# README command 2: the whole test suite (unit + integration) against real services,
# which it starts itself. `.ci/run` calls exactly this. Extra arguments go to pytest.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
started=$(date +%s)
bin=$(bash "$repo/scripts/bootstrap.sh" | tail -n 1)
export PATH="$bin:$PATH" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
cd "$repo"

kgqr services up
# A second node with the security plugin: the access tests (tests/integration/test_secured_access.py).
kgqr services up opensearch-secured
# The images docker/compose.yml runs (tests/containers), built from the registries only;
# an unchanged image is reused from the engine's cache.
kgqr images build
bash "$repo/scripts/test_browser.sh"
echo "test.sh: services ready after $(( $(date +%s) - started ))s"
ruff check .
ruff format --check .
# The packages and strictness are in pyproject.toml. Its cache lives beside the venv, so a
# fresh clone on a machine that ran this before checks what changed (14 s), not all (140 s).
# Two checkouts on one machine share it, so one run at a time holds it (flock, util-linux).
mypy_cache="${KGQR_HOME:-$HOME/.cache/kgqr}/mypy"
mkdir -p "$mypy_cache"
if command -v flock > /dev/null; then
  flock "$mypy_cache.lock" mypy --cache-dir "$mypy_cache"
else
  mypy --cache-dir "$mypy_cache"
fi
# The slowest tests, named in every run: .ci/run must stay under 40 minutes.
pytest tests --durations=25 "$@"
if [ $# -eq 0 ]; then
  # The testcontainers path (docs/containers.md): ingest, the proxy, the strategies and the
  # secured node again, with OpenSearch, Neo4j and Redis started from kgqr's images. Not
  # the tests that wait on the LLM (it stays the local one: 4 of the pass's 11 min), nor
  # those that kill a worker (kgqr's own processes, run the same either way: 73 s), nor
  # those of kgqr's own logic alone (same_on_containers: 90 s).
  KGQR_TEST_SERVICES=containers pytest --durations=10 \
    -m "not llm and not worker_faults and not same_on_containers" \
    tests/integration/test_ingest_pipeline.py \
    tests/integration/test_proxy.py tests/integration/test_graph_strategy.py \
    tests/integration/test_secured_access.py
fi
echo "test.sh: finished in $(( $(date +%s) - started ))s"
