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

if ! command -v valgrind >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then
        apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
    else
        echo "valgrind is not installed (apt-get install valgrind)" >&2
        exit 1
    fi
fi

# The guard counts the dev build (`cargo build --workspace`: the dependencies the test step built, so CI
# compiles only the bench itself; a release build of the agent's dependencies would cost CI minutes).
# EVENT_PATH_RELEASE=1 counts the release build instead (`cargo bench`), as the performance page's
# figures are; the committed baseline is the dev build's.
bin=${EVENT_PATH_BIN:-}
if [ -z "$bin" ]; then
    if [ "${EVENT_PATH_RELEASE:-0}" = 1 ]; then
        build=(cargo bench --locked -p apiary-agent --bench event_path --no-run)
    else
        build=(cargo build --workspace --locked --bench event_path)
    fi
    bin=$("${build[@]}" --message-format=json 2>/dev/null |
        python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "event_path" and m.get("executable"):
        print(m["executable"])')
fi
[ -x "$bin" ] || { echo "no event_path bench binary (cargo bench -p apiary-agent --bench event_path --no-run)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# instructions MODE N: the instructions callgrind counted over the whole run of `event_path MODE N`.
instructions() {
    local log="$work/$1-$2.log"
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" "$bin" "$1" "$2" >"$work/$1-$2.out" 2>"$log" || {
        cat "$log" "$work/$1-$2.out" >&2
        return 1
    }
    rm -f "$work/cg.out"
    awk '/Collected :/ { print $NF }' "$log"
}

i_parse1=$(instructions parse 1)
i_parse3=$(instructions parse 3)
i_commit1=$(instructions commit 1)
i_commit2=$(instructions commit 2)
parse=$(((i_parse3 - i_parse1) / 2 / LINES))
commit=$(((i_commit2 - i_commit1) / LINES))
echo "event path, instructions per input line (1,000 lines of the mixed Hive stream):"
echo "  parse + redact + prepare: $parse"
echo "  one group's commit:       $commit"
echo "  total:                    $((parse + commit))"
sed 's/^/  /' "$work/commit-2.out"

case "$mode" in
--print)
    exit 0
    ;;
--update)
    tolerance=$(awk -F= '$1 == "tolerance_percent" { print $2 }' "$BASELINE" 2>/dev/null || true)
    {
        echo "# Instructions per input line of the event path (scripts/event-path-guard.sh), measured by callgrind"
        echo "# on the dev build of agent/benches/event_path.rs. It moves only in a commit that says why."
        echo "tolerance_percent=${tolerance:-3}"
        echo "parse=$parse"
        echo "commit=$commit"
    } >"$BASELINE"
    echo "baseline written to $BASELINE"
    exit 0
    ;;
check) ;;
*)
    echo "usage: $0 [--update | --print]" >&2
    exit 2
    ;;
esac

value() { awk -F= -v k="$1" '$1 == k { print $2 }' "$BASELINE"; }
tolerance=$(value tolerance_percent)
status=0
for part in parse commit; do
    base=$(value "$part")
    now=${!part}
    verdict=$(python3 -c 'import sys
base, now, tol = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
change = (now - base) / base * 100
print("%+.1f%%" % change, "FAIL" if change > tol else ("FAIL (lower: record the gain with --update, in a commit saying why)" if change < -tol else "ok"))' \
        "$base" "$now" "$tolerance")
    echo "  $part: $now against the baseline's $base: $verdict"
    case "$verdict" in *FAIL*) status=1 ;; esac
done
if [ "$status" -ne 0 ]; then
    echo "the event path's instructions per line moved past ${tolerance}% of the baseline. Dearer: find the cause" >&2
    echo "(callgrind_annotate on a run of the bench binary), or, if the cost is wanted, update the baseline in a" >&2
    echo "commit that says why. Cheaper: record the gain (--update), so that a later loss cannot hide in the slack." >&2
fi
exit "$status"
