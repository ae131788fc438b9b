#!/usr/bin/env bash
# deploy/local/demo.sh — Apiary end to end on one machine, in one command.
#
#   ./deploy/local/demo.sh                  build, run a small team's day through agents and ingest, print the
#                                           dashboard, stop everything
#   ./deploy/local/demo.sh --keep-running   same, but leave the ingest, the agents (and a private Postgres)
#                                           running; prints the URLs, the read token and how to stop
#   ./deploy/local/demo.sh --stop           stop what a --keep-running demo left running
#
# What it does: builds the release binaries; makes a Postgres reachable (scripts/pg.sh: $DATABASE_URL or
# the machine's own server on 127.0.0.1:5432 if it answers, else a private cluster under ./.apiary/pg);
# creates a fresh database for the run (the previous demo database is dropped); migrates; creates a tenant,
# one ingest token per user bound to that user and device, and a read token; starts the ingest on a free
# port; starts one apiary-agent per user (data dir ./.apiary/demo/<user>/agent, device <user>-laptop,
# tailing its own HIVE_HOME ./.apiary/demo/hive/<user>, its OTLP receiver on a free loopback port, sync
# enabled against the ingest); writes the workload (deploy/local/workload.py: 3 users' day of Hive sessions,
# the tail of it live); sends alice's and carol's Claude Code sessions of the same day to their agents'
# OTLP receivers (deploy/local/claude_code.py post: OTLP/JSON log exports, one of them twice); waits until
# every agent has delivered everything; labels the colonies (each agent lists its colonies with their keys,
# the admin labels the keys); prints the dashboard (deploy/local/report.py) compared with the
# totals the generator computed; checks that no planted secret reached an outbox or Postgres.
#
# Environment (all optional):
#   APIARY_DEMO_USERS     users (default alice,bob,carol)      APIARY_DEMO_SEED     workload seed (default 7)
#   APIARY_DEMO_DB        database name (default apiary_demo)  APIARY_DEMO_TIMEOUT  delivery timeout s (default 180)
#   APIARY_DEMO_TRICKLE   seconds over which the last quarter of the day is written live (default 8; 0 = all at once)
#   APIARY_DEMO_SKIP_BUILD=1  use the binaries in target/release as they are
#   APIARY_DEMO_BIN_DIR=DIR   use the binaries in DIR as they are (no build; e.g. target/debug)
#   APIARY_DEMO_STATE=DIR     keep the demo's files (and a private Postgres) in DIR instead of ./.apiary
#   DATABASE_URL, APIARY_PG_DIR, APIARY_PG_FORCE_PRIVATE=1: see scripts/pg.sh
# Logs: ./.apiary/demo/logs (ingest.log, agent-<user>.log, build.log, workload.log, claude_code.log,
# webhook.log).
# Exit status: 0 when the dashboard matches the workload and nothing leaked; 1 otherwise.
# Every process the demo starts is stopped when it ends (or by --stop after --keep-running), and none of
# them writes to the demo's own output, so `./deploy/local/demo.sh | tee demo.log` and
# `out=$(./deploy/local/demo.sh)` return when the demo does.

set -euo pipefail

usage() { sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; }

KEEP=0
STOP_ONLY=0
for arg in "$@"; do
    case "$arg" in
        --keep-running) KEEP=1 ;;
        --stop) STOP_ONLY=1 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "demo.sh: unknown argument $arg (try --help)" >&2; exit 2 ;;
    esac
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
cd "$ROOT"
HERE=$ROOT/deploy/local
STATE=${APIARY_DEMO_STATE:-$ROOT/.apiary}
mkdir -p "$STATE"
STATE=$(cd "$STATE" && pwd -P)
DEMO=$STATE/demo
LOGS=$DEMO/logs
RUNFILE=$STATE/demo.run          # what a --keep-running demo left running (pids, pg dir)
BIN=${APIARY_DEMO_BIN_DIR:-$ROOT/target/release}
USERS=${APIARY_DEMO_USERS:-alice,bob,carol}
SEED=${APIARY_DEMO_SEED:-7}
DB_NAME=${APIARY_DEMO_DB:-apiary_demo}
TIMEOUT=${APIARY_DEMO_TIMEOUT:-180}
TRICKLE=${APIARY_DEMO_TRICKLE:-8}
IFS=, read -r -a USER_LIST <<<"$USERS"

T0=$(date +%s)
STEP=0
NSTEPS=12
step() {
    STEP=$((STEP + 1))
    printf '\n==> [%d/%d] %s   (+%ss)\n' "$STEP" "$NSTEPS" "$*" "$(($(date +%s) - T0))"
}
info() { printf '    %s\n' "$*"; }
die() {
    printf '\ndemo.sh: error: %s\n' "$*" >&2
    exit 1
}
need() { command -v "$1" >/dev/null 2>&1 || die "$1 is required ($2)"; }

# ---------------------------------------------------------------------------------------------------------
# Process bookkeeping: every process the demo starts in the background (the ingest, the agents, the webhook
# receiver, the stand-in runtime) is recorded with its start time ([pid]=start time in PROCS, in $RUNFILE for
# --keep-running), and only a pid that still runs the very process recorded (same pid, same start time:
# not a reused pid) is ever signalled. None of them writes to the demo's stdout or stderr.
# ---------------------------------------------------------------------------------------------------------
PIDS=()
declare -A PROCS=()
OWN_PG=0
READY=0

start_time() { # pid -> its start time (clock ticks since boot; field 22 of /proc/PID/stat), if it runs
    local stat rest fields
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    rest=${stat##*) }   # the fields after the command name, which may hold spaces and parentheses
    read -r -a fields <<<"$rest"
    [ "${fields[0]}" != Z ] || return 1   # exited, not yet reaped
    printf '%s\n' "${fields[19]}"
}

track() { # pid: a process this demo just started in the background
    local t
    t=$(start_time "$1") || t=gone
    PIDS+=("$1")
    PROCS[$1]=$t
}

is_ours() { # pid [start time] -> true if it still runs the process recorded
    local t
    t=$(start_time "$1") || return 1
    if [ -n "${2:-}" ]; then
        [ "$t" = "$2" ]
    else # a run file of an older demo recorded no start time: only its apiary binaries were tracked
        case "$(readlink "/proc/$1/exe" 2>/dev/null)" in "$BIN"/apiary-*) return 0 ;; *) return 1 ;; esac
    fi
}

stop_pid() { # pid start-time name
    local pid=$1 start=$2 name=$3 i
    is_ours "$pid" "$start" || { wait "$pid" 2>/dev/null || true; return 0; }
    kill -TERM "$pid" 2>/dev/null || return 0
    for i in $(seq 1 60); do
        is_ours "$pid" "$start" || { wait "$pid" 2>/dev/null || true; return 0; }
        sleep 0.25
    done
    echo "demo.sh: $name (pid $pid) did not stop within 15 s; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

# shellcheck disable=SC2317
write_runfile() {
    {
        for p in "${PIDS[@]}"; do echo "pid $p ${PROCS[$p]} $(cat "/proc/$p/comm" 2>/dev/null || echo '?')"; done
        if [ "$OWN_PG" = 1 ]; then echo "pg $APIARY_PG_BASE"; fi
    } >"$RUNFILE"
}

stop_recorded() { # stops what an earlier --keep-running demo left (from $RUNFILE)
    [ -f "$RUNFILE" ] || return 0
    local kind val start name stopped=0
    while read -r kind val start name; do
        case "$kind" in
            pid) if is_ours "$val" "$start"; then
                    stop_pid "$val" "$start" "${name:-pid} (pid $val)"
                    stopped=$((stopped + 1))
                fi ;;
            pg) if [ -d "$val/data" ]; then
                    # The recorded cluster, not one an outer `scripts/pg.sh start` exported (APIARY_PG_DATA
                    # names the cluster to stop before APIARY_PG_DIR does).
                    (unset APIARY_PG_DATA APIARY_PG_BASE && APIARY_PG_DIR=$val "$ROOT/scripts/pg.sh" stop) ||
                        echo "demo.sh: could not stop Postgres in $val" >&2
                fi ;;
        esac
    done <"$RUNFILE"
    rm -f "$RUNFILE"
    echo "demo.sh: stopped $stopped process(es) left running by the earlier --keep-running demo"
}

# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ "$KEEP" = 1 ] && [ "$READY" = 1 ]; then
        write_runfile
        exit 0
    fi
    if [ "${#PIDS[@]}" -gt 0 ]; then
        printf '\n==> stopping %d process(es)\n' "${#PIDS[@]}"
        local i
        for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
            stop_pid "${PIDS[$i]}" "${PROCS[${PIDS[$i]}]}" "pid ${PIDS[$i]}"
        done
    fi
    if [ "$OWN_PG" = 1 ]; then
        APIARY_PG_STARTED=1 apiary_pg_stop || true
    fi
    rm -f "$RUNFILE"
    exit "$rc"
}

if [ "$STOP_ONLY" = 1 ]; then
    stop_recorded
    exit 0
fi

need python3 "stdlib only; e.g. apt-get install python3"
need cargo "install Rust from https://rustup.rs"
stop_recorded || true
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rm -rf "$DEMO"
mkdir -p "$LOGS"

# ---------------------------------------------------------------------------------------------------------
step "Building apiary-ingest and apiary-agent (release; the first build takes several minutes)"
if [ -n "${APIARY_DEMO_BIN_DIR:-}" ]; then
    info "APIARY_DEMO_BIN_DIR: using $BIN as it is"
elif [ "${APIARY_DEMO_SKIP_BUILD:-0}" = 1 ] && [ -x "$BIN/apiary-agent" ] && [ -x "$BIN/apiary-ingest" ]; then
    info "APIARY_DEMO_SKIP_BUILD=1: using $BIN as it is"
else
    # progress: every 20th crate, our own crates, warnings about our code, errors; everything in build.log
    set +e
    cargo build --release -p apiary-ingest -p apiary-agent 2>&1 | tee "$LOGS/build.log" | awk '
        /^ *Compiling / { n++; if ($2 ~ /^apiary/ || n % 20 == 0) { printf "    compiling (%d crates so far): %s %s\n", n, $2, $3; fflush() } next }
        /^ *(Finished|Blocking)/ || /^error/ { sub(/^ */, "    "); print; fflush() }'
    rc=${PIPESTATUS[0]}
    set -e
    [ "$rc" = 0 ] || die "cargo build failed (exit $rc); see $LOGS/build.log"
fi
for b in apiary-ingest apiary-agent; do [ -x "$BIN/$b" ] || die "$BIN/$b is missing after the build"; done
info "$("$BIN/apiary-ingest" --version), $("$BIN/apiary-agent" --version)"

# ---------------------------------------------------------------------------------------------------------
step "Making Postgres reachable (scripts/pg.sh)"
export APIARY_PG_DIR=${APIARY_PG_DIR:-$STATE/pg}
# pg.sh's lines go through a file, not a pipe: a cluster it starts would inherit the pipe and hold the
# demo's output open for as long as it runs (a reader of a --keep-running demo would never see the end).
pg_ok=1
# shellcheck source=../../scripts/pg.sh
. "$ROOT/scripts/pg.sh" 2>"$LOGS/pg.sh.log" || pg_ok=0
sed 's/^/    /' "$LOGS/pg.sh.log"
[ "$pg_ok" = 1 ] || die "no PostgreSQL available (see the pg.sh lines above)"
if [ "${APIARY_PG_STARTED:-0}" = 1 ] || { [ "${APIARY_PG_SOURCE:-}" = private ] \
    && [ "${APIARY_PG_BASE:-}" = "$(cd "$STATE/pg" 2>/dev/null && pwd -P)" ]; }; then
    OWN_PG=1 # started now, or left running in ./.apiary/pg by an earlier --keep-running demo: ours to stop
fi
command -v psql >/dev/null 2>&1 || apiary_pg_bins || die "psql not found"
ADMIN_URL=$DATABASE_URL
info "server: ${APIARY_PG_SOURCE} ($(psql -w -X -A -t -d "$ADMIN_URL" -c 'show server_version' 2>/dev/null || echo '?'))"

# ---------------------------------------------------------------------------------------------------------
step "Creating a fresh database '$DB_NAME' and migrating"
psql -w -X -q -v ON_ERROR_STOP=1 -d "$ADMIN_URL" >"$LOGS/psql.log" 2>&1 <<SQL || die "could not recreate database $DB_NAME; see $LOGS/psql.log"
SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '$DB_NAME' AND pid <> pg_backend_pid();
DROP DATABASE IF EXISTS "$DB_NAME";
CREATE DATABASE "$DB_NAME";
SQL
export DATABASE_URL
DATABASE_URL=$(python3 "$HERE/demo_util.py" db-url "$ADMIN_URL" "$DB_NAME")
"$BIN/apiary-ingest" migrate >"$LOGS/migrate.log" 2>&1 || die "apiary-ingest migrate failed; see $LOGS/migrate.log"
info "$DATABASE_URL migrated"

# ---------------------------------------------------------------------------------------------------------
step "Creating a tenant and tokens"
last_line() { grep -v '^[[:space:]]*$' | tail -n 1 | tr -d '[:space:]'; }
TENANT=$("$BIN/apiary-ingest" tenant create --name "demo-team" 2>>"$LOGS/admin.log" | last_line) \
    || die "tenant create failed; see $LOGS/admin.log"
[ -n "$TENANT" ] || die "tenant create printed no id; see $LOGS/admin.log"
info "tenant $TENANT"
umask 077
for u in "${USER_LIST[@]}"; do
    mkdir -p "$DEMO/$u"
    tok=$("$BIN/apiary-ingest" token create --tenant "$TENANT" --scope ingest --user "$u" --device "$u-laptop" \
        2>>"$LOGS/admin.log" | last_line) || die "token create for $u failed; see $LOGS/admin.log"
    [ -n "$tok" ] || die "token create for $u printed nothing; see $LOGS/admin.log"
    # 0600: the agent refuses a token file others can read.
    (umask 077 && printf '%s\n' "$tok" >"$DEMO/$u/ingest.token")
    info "ingest token for $u on device $u-laptop -> .apiary/demo/$u/ingest.token"
done
READ_TOKEN=$("$BIN/apiary-ingest" token create --tenant "$TENANT" --scope read 2>>"$LOGS/admin.log" | last_line) \
    || die "read token create failed; see $LOGS/admin.log"
(umask 077 && printf '%s\n' "$READ_TOKEN" >"$DEMO/read.token")
ADMIN_TOKEN=$("$BIN/apiary-ingest" token create --tenant "$TENANT" --scope admin 2>>"$LOGS/admin.log" | last_line) \
    || die "admin token create failed; see $LOGS/admin.log"
(umask 077 && printf '%s\n' "$ADMIN_TOKEN" >"$DEMO/admin.token")
umask 022
info "read token -> .apiary/demo/read.token, admin token -> .apiary/demo/admin.token"

# ---------------------------------------------------------------------------------------------------------
step "Starting the ingest"
PORT=$(python3 "$HERE/demo_util.py" free-port)
INGEST_URL=http://127.0.0.1:$PORT
# Alerts go to a receiver on the same host (http, loopback): allowed for this local ingest only.
APIARY_LOG_FORMAT=text APIARY_ALERTS_ALLOW_PRIVATE_DESTINATIONS=true APIARY_ALERTS_EVALUATE_SECS=2 \
    "$BIN/apiary-ingest" serve --listen "127.0.0.1:$PORT" </dev/null >"$LOGS/ingest.log" 2>&1 &
INGEST_PID=$!
track "$INGEST_PID"
python3 "$HERE/demo_util.py" wait-http "$INGEST_URL/readyz" --pid "$INGEST_PID" --log "$LOGS/ingest.log" --timeout 60 \
    || die "the ingest did not become ready"
info "$INGEST_URL (pid $INGEST_PID, log .apiary/demo/logs/ingest.log)"

# ---------------------------------------------------------------------------------------------------------
step "Starting one agent per user (${USERS}), sync enabled"
declare -A AGENT_ADDR AGENT_PID
DRAIN_ARGS=()
for u in "${USER_LIST[@]}"; do
    dir=$DEMO/$u/agent
    home=$DEMO/hive/$u
    mkdir -p "$dir" "$home"
    cat >"$dir/agent.toml" <<TOML
# written by deploy/local/demo.sh
listen = "127.0.0.1:0"
hive_home = "$home"
zone = "local"

[identity]
user_id = "$u"
device_id = "$u-laptop"

[push]
heartbeat_interval_secs = 5

[otlp]
# a free port each (the default, 127.0.0.1:4318, can serve one agent only); the agent writes it to otlp.addr
listen = "127.0.0.1:0"
TOML
    "$BIN/apiary-agent" sync enable --data-dir "$dir" --endpoint "$INGEST_URL" \
        --token-file "$DEMO/$u/ingest.token" >>"$LOGS/agent-$u.log" 2>&1 \
        || die "apiary-agent sync enable for $u failed; see $LOGS/agent-$u.log"
    "$BIN/apiary-agent" run --data-dir "$dir" </dev/null >>"$LOGS/agent-$u.log" 2>&1 &
    AGENT_PID[$u]=$!
    track "${AGENT_PID[$u]}"
done
for u in "${USER_LIST[@]}"; do
    AGENT_ADDR[$u]=$(python3 "$HERE/demo_util.py" wait-agent "$DEMO/$u/agent" --pid "${AGENT_PID[$u]}" \
        --log "$LOGS/agent-$u.log" --timeout 60) || die "the agent of $u did not start"
    OTLP_ADDR=$(cat "$DEMO/$u/agent/otlp.addr" 2>/dev/null || echo "none (see $LOGS/agent-$u.log)")
    info "$u: agent on http://${AGENT_ADDR[$u]} (pid ${AGENT_PID[$u]}), OTLP on http://$OTLP_ADDR, tailing .apiary/demo/hive/$u"
    DRAIN_ARGS+=("$u=$DEMO/$u/agent:${AGENT_PID[$u]}")
done

# ---------------------------------------------------------------------------------------------------------
step "Writing the team's day of Hive sessions (deploy/local/workload.py; the last part live over ${TRICKLE}s)"
# A stand-in for the process of carol's `hive run digest_agent`: its state.json names this pid, and it is
# killed -9 below, in the middle of the run's last tool call (the run then reads `crashed`, not `stalled`).
sleep 600 </dev/null >/dev/null 2>&1 &
RUNTIME_PID=$!
track "$RUNTIME_PID"
python3 "$HERE/workload.py" --out "$DEMO/hive" --users "$USERS" --seed "$SEED" --trickle "$TRICKLE" \
    --runtime-pid "$RUNTIME_PID" \
    2> >(tee "$LOGS/workload.log" | grep --line-buffered -v 'trickle:' | sed -u 's/^workload: /    /') \
    || die "the workload generator failed; see $LOGS/workload.log"
python3 "$HERE/check_workload.py" --out "$DEMO/hive" >>"$LOGS/workload.log" 2>&1 \
    || die "the workload's files do not check out (deploy/local/check_workload.py); see $LOGS/workload.log"
info "files checked (deploy/local/check_workload.py): format, pairing, markers, totals, work, status story"
sleep 2
kill -KILL "$RUNTIME_PID" 2>/dev/null || true
wait "$RUNTIME_PID" 2>/dev/null || true
info "killed -9 the runtime of carol's weekly digest run (pid $RUNTIME_PID), in the middle of a tool call"

# ---------------------------------------------------------------------------------------------------------
CC_ARGS=()
for u in "${USER_LIST[@]}"; do
    if [ -d "$DEMO/hive/claude_code/$u" ]; then CC_ARGS+=("$u=$DEMO/$u/agent"); fi
done
step "Sending Claude Code's telemetry of the same day to the agents' OTLP receivers (deploy/local/claude_code.py)"
if [ "${#CC_ARGS[@]}" -gt 0 ]; then
    python3 "$HERE/claude_code.py" post --dir "$DEMO/hive/claude_code" "${CC_ARGS[@]}" \
        2> >(tee "$LOGS/claude_code.log" | sed -u 's/^claude_code: /    /') \
        || die "posting Claude Code's OTLP exports failed; see $LOGS/claude_code.log and the agents' logs"
else
    info "none of ${USERS} runs Claude Code in this workload"
fi

# ---------------------------------------------------------------------------------------------------------
step "Waiting until every agent has delivered everything (timeout ${TIMEOUT}s)"
python3 "$HERE/demo_util.py" wait-drained --expected "$DEMO/hive/expected.json" --timeout "$TIMEOUT" \
    "${DRAIN_ARGS[@]}" 2>&1 || die "delivery did not finish; logs in $LOGS"

# ---------------------------------------------------------------------------------------------------------
if grep -q '"status": "crashed"' "$DEMO/hive/expected.json"; then
    info "waiting for the dead runtime to reach the dashboard (the agent's next scan and heartbeat):"
    python3 "$HERE/demo_util.py" wait-status --url "$INGEST_URL" --token-file "$DEMO/read.token" \
        --expected "$DEMO/hive/expected.json" --status crashed --timeout 60 2>&1 \
        || info "(the report below shows what it reads instead)"
fi

# ---------------------------------------------------------------------------------------------------------
info "labelling the colonies (each user reads their colonies' keys from their agent, as its settings page"
info "lists them, and tells the admin, who labels each key: PUT /v1/colonies/{key}/label):"
LABEL_ARGS=()
for u in "${USER_LIST[@]}"; do LABEL_ARGS+=("$u=$DEMO/$u/agent"); done
python3 "$HERE/demo_util.py" label-colonies --url "$INGEST_URL" --admin-token-file "$DEMO/admin.token" \
    "${LABEL_ARGS[@]}" 2>&1 || die "labelling the colonies failed"

# ---------------------------------------------------------------------------------------------------------
step "The dashboard (deploy/local/report.py, read API with the read token)"
echo
REPORT_RC=0
python3 "$HERE/report.py" --url "$INGEST_URL" --token-file "$DEMO/read.token" \
    --expected "$DEMO/hive/expected.json" | tee "$LOGS/report.txt" || REPORT_RC=${PIPESTATUS[0]}
[ "$REPORT_RC" -le 1 ] || die "report.py could not read the API"

# ---------------------------------------------------------------------------------------------------------
step "A monthly budget crossing 80%, and its alert delivered to a local webhook receiver"
WEBHOOK_SECRET=$(python3 -c 'import secrets; print("whsec_" + secrets.token_hex(24))')
rm -f "$DEMO/webhook.jsonl" "$DEMO/webhook.port"
python3 "$HERE/demo_util.py" receiver --port-file "$DEMO/webhook.port" --out "$DEMO/webhook.jsonl" \
    --secret "$WEBHOOK_SECRET" </dev/null >>"$LOGS/webhook.log" 2>&1 &
track "$!"
for _ in $(seq 50); do [ -s "$DEMO/webhook.port" ] && break; sleep 0.1; done
HOOK_URL="http://127.0.0.1:$(cat "$DEMO/webhook.port" 2>/dev/null)/apiary"
ALERT_RC=0
LIMIT=$(python3 "$HERE/demo_util.py" budget-limit --url "$INGEST_URL" --token-file "$DEMO/read.token" --share 90) \
    || ALERT_RC=1
if [ "$ALERT_RC" = 0 ]; then
    admin() { APIARY_ALERTS_ALLOW_PRIVATE_DESTINATIONS=true "$BIN/apiary-ingest" "$@" 2>>"$LOGS/admin.log" | last_line; }
    DEST=$(admin alert destination create --tenant "$TENANT" --kind webhook --url "$HOOK_URL" \
        --secret "$WEBHOOK_SECRET" --name "demo receiver") || ALERT_RC=1
    BUDGET=$(admin budget create --tenant "$TENANT" --period month --limit-usd "$LIMIT" \
        --thresholds 80,100 --name "team monthly") || ALERT_RC=1
    RULE=$(admin alert rule create --tenant "$TENANT" --kind budget --destination "$DEST" --budget "$BUDGET" \
        --name "team budget") || ALERT_RC=1
    info "budget $BUDGET: $LIMIT USD this month (UTC), thresholds 80% and 100%; this month's spend is 90% of it"
    info "rule $RULE sends its notifications to $HOOK_URL (signed with the destination's secret)"
    python3 "$HERE/demo_util.py" wait-webhook --file "$DEMO/webhook.jsonl" --count 1 --timeout 60 2>&1 \
        || ALERT_RC=1
fi
[ "$ALERT_RC" = 0 ] || info "PROBLEM: the budget alert was not delivered; see $LOGS/admin.log and $LOGS/ingest.log"

# ---------------------------------------------------------------------------------------------------------
step "Privacy check: planted secrets in the outboxes and in Postgres"
PATTERN=$(python3 -c 'import json,sys; print("|".join(p.replace(".", "\\.") for p in json.load(open(sys.argv[1]))["privacy"]["leak_patterns"]))' "$DEMO/hive/expected.json")
PLANTED=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["privacy"]["canaries_planted"])' "$DEMO/hive/expected.json")
OUTBOX_HITS=0
for u in "${USER_LIST[@]}"; do
    c=$(cat "$DEMO/$u/agent"/outbox.db* 2>/dev/null | grep -a -c -E "$PATTERN" || true)
    OUTBOX_HITS=$((OUTBOX_HITS + c))
    [ "$c" = 0 ] || info "LEAK: $c line(s) of $u's outbox files match $PATTERN"
done
USER_TABLES="FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p')
    AND NOT c.relispartition AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'"
PG_HITS=$(psql -w -X -q -A -t -v ON_ERROR_STOP=1 -d "$DATABASE_URL" 2>>"$LOGS/psql.log" <<SQL || echo "?"
SELECT coalesce(sum(n), 0) FROM (
  SELECT (xpath('/row/n/text()', query_to_xml(format(
           'SELECT count(*) AS n FROM %I.%I t WHERE t::text ~ %L', n.nspname, c.relname, \$re\$$PATTERN\$re\$),
           false, true, '')))[1]::text::bigint AS n
  $USER_TABLES) s;
SQL
)
TABLES=$(psql -w -X -q -A -t -d "$DATABASE_URL" -c "SELECT count(*) $USER_TABLES" 2>>"$LOGS/psql.log" || echo "?")
info "$PLANTED canary markers, plus home paths, emails and API keys, were planted in prompts, tool inputs and results"
info "(Hive's and Claude Code's: its prompts, tool parameters and errors, e-mail, account and organization ids)"
info "found in the ${#USER_LIST[@]} agents' outbox files (db + WAL): $OUTBOX_HITS line(s); in Postgres ($TABLES tables, whole rows): $PG_HITS row(s)"
LEAKS=0
[ "$OUTBOX_HITS" = 0 ] && [ "$PG_HITS" = 0 ] || LEAKS=1

# ---------------------------------------------------------------------------------------------------------
ELAPSED=$(($(date +%s) - T0))
echo
if [ "$REPORT_RC" = 0 ] && [ "$LEAKS" = 0 ] && [ "$ALERT_RC" = 0 ]; then
    echo "Demo OK in ${ELAPSED}s: the dashboard matches what the team's Hive and Claude Code produced, and nothing sensitive left the devices."
    RC=0
else
    echo "Demo FINISHED WITH PROBLEMS in ${ELAPSED}s: $([ "$REPORT_RC" = 0 ] || echo 'dashboard mismatch (see above); ')$([ "$LEAKS" = 0 ] || echo 'sensitive data found (see above); ')$([ "$ALERT_RC" = 0 ] || echo 'budget alert not delivered (see above)')"
    RC=1
fi
READY=1

if [ "$KEEP" = 1 ]; then
    cat <<EOF

Still running (--keep-running):
  ingest        $INGEST_URL          (log .apiary/demo/logs/ingest.log)
  dashboard     $INGEST_URL/         (sign in with the read token below)
EOF
    for u in "${USER_LIST[@]}"; do
        printf '  agent %-7s http://%s   (token: .apiary/demo/%s/agent/agent.token, Hive home .apiary/demo/hive/%s)\n' \
            "$u" "${AGENT_ADDR[$u]}" "$u" "$u"
        printf '        %-7s OTLP http://%s   (OTEL_EXPORTER_OTLP_ENDPOINT for Claude Code, same token)\n' \
            "" "$(cat "$DEMO/$u/agent/otlp.addr" 2>/dev/null || echo '-')"
        printf '        %-7s settings page http://%s/settings   (sign in with .apiary/demo/%s/agent/settings.token)\n' \
            "" "${AGENT_ADDR[$u]}" "$u"
    done
    if [ "$OWN_PG" = 1 ]; then echo "  postgres      $ADMIN_URL   (private cluster in $APIARY_PG_BASE)"; fi
    cat <<EOF
  database      $DATABASE_URL
  read token    $READ_TOKEN

Try:
  curl -s -H "Authorization: Bearer $READ_TOKEN" "$INGEST_URL/v1/usage?group_by=user,model"
  curl -s -H "Authorization: Bearer $READ_TOKEN" "$INGEST_URL/v1/devices"
  python3 deploy/local/report.py --url $INGEST_URL --token-file .apiary/demo/read.token
  tail -f .apiary/demo/logs/agent-${USER_LIST[0]}.log      # the agents keep tailing .apiary/demo/hive/<user>
  target/release/apiary-agent status --data-dir .apiary/demo/${USER_LIST[0]}/agent
Stop everything with:
  ./deploy/local/demo.sh --stop
EOF
fi
exit "$RC"
