#!/usr/bin/env bash
# The edit-test loop: ruff, the unit tests, and the integration test modules marked `quick`
# (they need only the always-on services: no secured node, no browser, no LLM answer
# waited on). Under 3 minutes on 2 cores with the services up; it starts them when they
# are down. Not CI's command: scripts/test.sh runs everything. Extra arguments go to pytest.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
started=$(date +%s)
bin=$(bash "$repo/scripts/bootstrap.sh" | tail -n 1)
export PATH="$bin:$PATH" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
cd "$repo"

kgqr services up >/dev/null
ruff check .
pytest tests -m "(unit and not slow) or quick" -p no:cacheprovider "$@"
echo "test-quick.sh: finished in $(( $(date +%s) - started ))s"
