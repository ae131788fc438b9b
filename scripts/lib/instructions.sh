# shellcheck shell=bash
# Shared by the instruction-count guards (scripts/event-path-guard.sh, scripts/ingest-path-guard.sh):
# sourced, defines functions only.
#
#   guard_valgrind                         valgrind on PATH (apt-get installs it when missing and root)
#   guard_bench_bin PACKAGE BENCH RELEASE  builds a bench binary (the dev build, or the release build when
#                                          RELEASE is 1) and prints its path
#   guard_count WORK BIN ARGS...           instructions callgrind counted over a whole run of BIN ARGS
#                                          (its output kept in WORK/<args>.out)
#   guard_mode MODE                        exits with the usage unless MODE is check, --print or --update
#   guard_compare BASELINE PART...         each PART (a shell variable holding today's figure) against the
#                                          baseline file's `PART=N` and its `tolerance_percent`; prints a
#                                          line per part, returns 1 if any moved past the tolerance, up or down
#   guard_finish MODE BASELINE HEADER PART...
#                                          --print: nothing more; --update: rewrites BASELINE (HEADER's lines
#                                          as comments, the tolerance kept, each PART=N); check: guard_compare

guard_mode() {
    case "$1" in check | --print | --update) ;; *)
        echo "usage: $0 [--update | --print]" >&2
        exit 2
        ;;
    esac
}

guard_valgrind() {
    command -v valgrind >/dev/null 2>&1 && return 0
    if [ "$(id -u)" -eq 0 ]; then
        apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
    else
        echo "valgrind is not installed (apt-get install valgrind)" >&2
        return 1
    fi
}

# The guards count the dev build (`cargo build --workspace`: the dependencies the test step built, so CI
# compiles only the bench itself; a release build of the dependencies would cost CI minutes).
guard_bench_bin() {
    local package=$1 bench=$2 release=$3 build
    if [ "$release" = 1 ]; then
        build=(cargo bench --locked -p "$package" --bench "$bench" --no-run)
    else
        build=(cargo build --workspace --locked --bench "$bench")
    fi
    "${build[@]}" --message-format=json 2>/dev/null |
        python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == sys.argv[1] and m.get("executable"):
        print(m["executable"])' "$bench"
}

guard_count() {
    local work=$1 bin=$2
    shift 2
    local name
    name=$(printf '%s-' "$@")
    local log="$work/${name}log"
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" "$bin" "$@" >"$work/${name}out" 2>"$log" || {
        cat "$log" "$work/${name}out" >&2
        return 1
    }
    rm -f "$work/cg.out"
    awk '/Collected :/ { print $NF }' "$log"
}

guard_compare() {
    local baseline=$1 status=0 part base now verdict tolerance
    shift
    tolerance=$(awk -F= '$1 == "tolerance_percent" { print $2 }' "$baseline")
    for part in "$@"; do
        base=$(awk -F= -v k="$part" '$1 == k { print $2 }' "$baseline")
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
        echo "instructions moved past ${tolerance}% of the baseline ($baseline). Dearer: find the cause" >&2
        echo "(callgrind_annotate on a run of the bench binary), or, if the cost is wanted, update the baseline in a" >&2
        echo "commit that says why. Cheaper: record the gain (--update), so that a later loss cannot hide in the slack." >&2
    fi
    return "$status"
}

guard_finish() {
    local mode=$1 baseline=$2 header=$3 tolerance part
    shift 3
    case "$mode" in
    --print) return 0 ;;
    --update)
        tolerance=$(awk -F= '$1 == "tolerance_percent" { print $2 }' "$baseline" 2>/dev/null || true)
        {
            printf '%s\n' "$header" | sed 's/^/# /'
            echo "tolerance_percent=${tolerance:-3}"
            for part in "$@"; do
                echo "$part=${!part}"
            done
        } >"$baseline"
        echo "baseline written to $baseline"
        ;;
    *) guard_compare "$baseline" "$@" ;;
    esac
}
