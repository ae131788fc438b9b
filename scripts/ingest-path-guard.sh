#!/usr/bin/env bash
# The ingest's batch write path in instructions of the ingest process, against the committed baseline
# (ingest/benches/write-path.baseline).
#
#   scripts/ingest-path-guard.sh            measure, compare, fail past the tolerance (up or down)
#   scripts/ingest-path-guard.sh --update   measure and write the baseline (commit it, saying why it moved)
#   WRITE_PATH_BIN=/path/to/write_path scripts/ingest-path-guard.sh --print
#                                           measure another build's bench binary, compare nothing
#
# Runs the dev build of `ingest/benches/write_path.rs` (WRITE_PATH_RELEASE=1: the release build) under
# valgrind's callgrind: `warm` (a fresh database, the router, three warm-up batches), `large` (then one
# 1000-event batch) and `small` (then 50 batches of 20 events from 50 devices). The differences with
# `warm` are what the ingest process spent taking those batches — routing, decompression, parsing,
# validation, the token, its side of the database's protocol — per 1000 events. The database's own work
# is counted by ingest/tests/write_costs.rs (statements, WAL bytes, buffers). Needs a PostgreSQL server
# (scripts/pg.sh finds or starts one); its speed changes the time, not these counts.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BASELINE=ingest/benches/write-path.baseline
mode=${1:-check}

# shellcheck source=scripts/lib/instructions.sh
. scripts/lib/instructions.sh
guard_mode "$mode"
guard_valgrind

bin=${WRITE_PATH_BIN:-$(guard_bench_bin apiary-ingest write_path "${WRITE_PATH_RELEASE:-0}")}
[ -x "$bin" ] || { echo "no write_path bench binary (cargo bench -p apiary-ingest --bench write_path --no-run)" >&2; exit 1; }

# shellcheck source=scripts/pg.sh
. scripts/pg.sh || exit 1
work=$(mktemp -d)
trap 'rm -rf "$work"; apiary_pg_stop' EXIT

i_warm=$(guard_count "$work" "$bin" warm)
i_large=$(guard_count "$work" "$bin" large)
i_small=$(guard_count "$work" "$bin" small)
large=$((i_large - i_warm))
small=$((i_small - i_warm))
echo "ingest write path, instructions of the ingest process per 1000 events:"
echo "  one batch of 1000 events:             $large"
echo "  50 batches of 20 events, 50 devices:  $small"

guard_finish "$mode" "$BASELINE" "Instructions of the ingest process per 1000 events of the batch write path (scripts/ingest-path-guard.sh),
measured by callgrind on the dev build of ingest/benches/write_path.rs. It moves only in a commit that says why." large small
