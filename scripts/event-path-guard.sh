#!/usr/bin/env bash
# The event path's instruction counts against the committed baseline (agent/benches/event-path.baseline).
#
#   scripts/event-path-guard.sh            measure, compare, fail past the tolerance (up or down)
#   scripts/event-path-guard.sh --update   measure and write the baseline (commit it, saying why it moved)
#   EVENT_PATH_BIN=/path/to/event_path scripts/event-path-guard.sh --print
#                                          measure another build's bench binary, compare nothing
#
# Runs the dev build of `agent/benches/event_path.rs` (EVENT_PATH_RELEASE=1: the release build) under valgrind's callgrind (installed with apt-get
# when missing and root): `parse 1` and `parse 3` (the body of 1,000 mixed Hive lines parsed once or three
# times: classify, adapt, redact, prepare), `commit 1` and `commit 2` (one or two groups of those events
# committed by the outbox's writer). The differences are one parse of the body and one group's commit into
# an outbox that already holds a group, whatever the start-up costs; each is divided by the 1,000 input
# lines. Instruction counts of one input vary by well under 1% between runs (threads, hash seeds), where
# wall-clock rates on a shared machine vary by ±15–25%: a rise past the tolerance is the code's.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BASELINE=agent/benches/event-path.baseline
LINES=1000
mode=${1:-check}

# shellcheck source=scripts/lib/instructions.sh
. scripts/lib/instructions.sh
guard_mode "$mode"
guard_valgrind

# EVENT_PATH_RELEASE=1 counts the release build instead (`cargo bench`), as the performance page's
# figures are; the committed baseline is the dev build's.
bin=${EVENT_PATH_BIN:-$(guard_bench_bin apiary-agent event_path "${EVENT_PATH_RELEASE:-0}")}
[ -x "$bin" ] || { echo "no event_path bench binary (cargo bench -p apiary-agent --bench event_path --no-run)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

i_parse1=$(guard_count "$work" "$bin" parse 1)
i_parse3=$(guard_count "$work" "$bin" parse 3)
i_commit1=$(guard_count "$work" "$bin" commit 1)
i_commit2=$(guard_count "$work" "$bin" commit 2)
parse=$(((i_parse3 - i_parse1) / 2 / LINES))
commit=$(((i_commit2 - i_commit1) / LINES))
echo "event path, instructions per input line (1,000 lines of the mixed Hive stream):"
echo "  parse + redact + prepare: $parse"
echo "  one group's commit:       $commit"
echo "  total:                    $((parse + commit))"
sed 's/^/  /' "$work/commit-2-out"

guard_finish "$mode" "$BASELINE" "Instructions per input line of the event path (scripts/event-path-guard.sh), measured by callgrind
on the dev build of agent/benches/event_path.rs. It moves only in a commit that says why." parse commit
