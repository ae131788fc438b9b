#!/usr/bin/env bash
# The Apiary test command: ./scripts/test.sh [extra cargo test args]
#
# Makes a PostgreSQL server reachable (scripts/pg.sh: $DATABASE_URL, else 127.0.0.1:5432, else a
# private temp cluster that is stopped and deleted on exit), exports DATABASE_URL, then runs
#     cargo test --workspace --locked "$@"
# and exits with cargo's status. Set APIARY_PG_FORCE_PRIVATE=1 to always use a private cluster.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=scripts/pg.sh
. scripts/pg.sh

trap 'apiary_pg_stop' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "test.sh: DATABASE_URL=$DATABASE_URL" >&2
status=0
cargo test --workspace --locked "$@" || status=$?
exit "$status"
