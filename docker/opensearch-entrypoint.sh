#!/usr/bin/env bash
# Starts the node the way the official image does: every environment variable with a dot in
# its name (`discovery.type`) is an `-E` setting; DISABLE_SECURITY_PLUGIN=true turns the
# security plugin off. With KGQR_SECURITY_ADMIN_PASSWORD set (a single container, as the
# test suite's secured node), configure.sh secures the config folder first; compose runs
# it in a one-shot container instead, so the node never holds those passwords.
set -euo pipefail
if [ -n "${KGQR_SECURITY_ADMIN_PASSWORD:-}" ]; then
  bash /kgqr-security/configure.sh
fi
settings=()
while IFS='=' read -r -d '' name value; do
  case $name in *.*) settings+=(-E "$name=$value") ;; esac
done < <(env -0)
if [ "${DISABLE_SECURITY_PLUGIN:-false}" = true ]; then
  settings+=(-E plugins.security.disabled=true)
fi
exec /usr/share/opensearch/bin/opensearch "${settings[@]}" "$@"
