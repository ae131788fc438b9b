#!/usr/bin/env bash
# Installs a headless browser for the dashboard's browser test (tests/tests/dashboard_browser.rs):
# Debian's chromium and its WebDriver, chromium-driver. Idempotent and quiet: does nothing when both
# are on PATH. Needs root (or sudo) and the Debian package archive.
set -euo pipefail

if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
command -v chromium >/dev/null && command -v chromedriver >/dev/null
