#!/usr/bin/env bash
# Installs Debian's headless Chromium and its driver (the tuning page's browser test)
# when they are missing. Needs root and apt; otherwise says what to install and fails.
set -euo pipefail
if command -v chromium >/dev/null && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "test_browser.sh: install chromium and chromium-driver (Debian packages) first" >&2
  exit 1
fi
echo "test_browser.sh: installing chromium and chromium-driver" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium chromium-driver >/dev/null
