#!/usr/bin/env bash
# Creates (once) the Python environment kgqr runs in and installs this checkout into it.
# The venv lives outside the repo, under $KGQR_HOME (default ~/.cache/kgqr), so fresh
# clones on the same machine reuse the ~3 GB of dependencies (torch) already installed.
# Prints the venv's bin folder on its last line.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export KGQR_HOME=${KGQR_HOME:-$HOME/.cache/kgqr}
venv=${KGQR_VENV:-$KGQR_HOME/venv}
python=${KGQR_PYTHON:-python3}

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "kgqr needs Python 3.11 or newer as '$python' (set KGQR_PYTHON to another one)" >&2
  exit 1
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "bootstrap: creating $venv" >&2
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip setuptools wheel
fi

# Re-install only when the dependencies or the checkout's path changed.
stamp=$( (cat "$repo/pyproject.toml"; echo "$repo") | sha256sum | cut -d' ' -f1)
if [ "$(cat "$venv/.kgqr-stamp" 2>/dev/null || true)" != "$stamp" ]; then
  echo "bootstrap: installing kgqr and its dependencies into $venv (first time: several minutes)" >&2
  "$venv/bin/python" -m pip install --progress-bar off -e "$repo[test]" \
    | { grep -v '^Requirement already satisfied' || true; } >&2
  echo "$stamp" > "$venv/.kgqr-stamp"
fi
# `kgqr` in every shell, without activating the venv: a link in the user's bin folder.
bin_dir=${KGQR_BIN_DIR:-$HOME/.local/bin}
mkdir -p "$bin_dir"
ln -sf "$venv/bin/kgqr" "$bin_dir/kgqr"
case ":$PATH:" in
  *":$bin_dir:"*) ;;
  *) echo "bootstrap: kgqr is linked into $bin_dir, which is not on your PATH; add it" \
       "(export PATH=\"$bin_dir:\$PATH\") or run: source $venv/bin/activate" >&2 ;;
esac
echo "$venv/bin"
