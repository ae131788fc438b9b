#!/usr/bin/env bash
# Installs the command-line tools the documentation's runnable blocks use (tests/tests/docs.rs): curl,
# jq and the PostgreSQL client programs (createdb). Idempotent and quiet: does nothing when all are on
# PATH. Needs root (or sudo) and the Debian package archive.
set -euo pipefail

missing=()
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v jq >/dev/null 2>&1 || missing+=(jq)
command -v createdb >/dev/null 2>&1 || missing+=(postgresql-client)
if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
command -v curl >/dev/null && command -v jq >/dev/null && command -v createdb >/dev/null
