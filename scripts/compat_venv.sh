#!/usr/bin/env bash
# Creates (once) the venv in which the client-compatibility suite runs the clients users
# bring (Haystack, LlamaIndex, LangChain, opensearch-dsl, opensearch-py): they pull in far
# more than kgqr needs, and their own versions of shared packages, so they get their own
# venv next to kgqr's, rebuilt when tests/compat/requirements.txt or constraints.txt change.
# Prints the venv's python on its last line.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export KGQR_HOME=${KGQR_HOME:-$HOME/.cache/kgqr}
venv=${KGQR_COMPAT_VENV:-$KGQR_HOME/compat-venv}
python=${KGQR_PYTHON:-python3}
requirements=$repo/tests/compat/requirements.txt
constraints=$repo/tests/compat/constraints.txt

stamp=$(cat "$requirements" "$constraints" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$venv/.kgqr-stamp" 2>/dev/null || true)" != "$stamp" ]; then
  echo "compat: building the clients' venv in $venv (first time: a minute or two)" >&2
  "$python" -m venv --clear "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  "$venv/bin/python" -m pip install -q --progress-bar off -r "$requirements" -c "$constraints" >&2
  echo "$stamp" > "$venv/.kgqr-stamp"
fi
echo "$venv/bin/python"
