#!/usr/bin/env bash
# scripts/citus-rebalance-check.sh: rebalancing and tenant isolation tried for real on a local Citus
# cluster, with the ingest serving through every step (the guide is docs/scaling.md, "Citus").
#
#   1. a fresh cluster of its own (coordinator + 2 workers; scripts/citus.sh with APIARY_CITUS_DIR
#      default target/citus-rebalance and ports from 56532, so the test cluster is left alone), a
#      database `apiary` migrated by `apiary-ingest migrate --citus`, N tenants, `apiary-ingest serve`;
#   2. load: every tenant posts batches of llm.turn events (model m1, spread over 3 days) through
#      POST /v1/batches; tenant 0 is the big one. Its usage (day x model) is recorded from /v1/usage;
#   3. `scripts/citus.sh add-worker`, then `SELECT citus_rebalance_start()` and citus_rebalance_wait();
#   4. isolate_tenant_to_new_shard('event_keys', tenant 0, 'CASCADE'), then that shard group moved to
#      the new worker (citus_move_shard_placement; to the first worker if the rebalance already put it on
#      the new one), a new events partition created after it; during each of the three (rebalance,
#      isolation, move) a writer keeps posting batches (model m-during) for every tenant;
#   5. after each step: every tenant's m1 rows equal those recorded before (usage sums before ==
#      after), and every tenant's totals equal what was sent (all accepted, none lost, none doubled);
#      finally tenant 0 posts again (model m-after) and its usage is exact.
# Prints the commands' durations and the shard placement; exits non-zero on the first difference.
#
# Environment: APIARY_REBALANCE_TENANTS (default 6), APIARY_REBALANCE_BATCHES (batches per small tenant,
# default 20; tenant 0 posts 5 times as many), APIARY_REBALANCE_EVENTS (events per batch, default 50),
# APIARY_REBALANCE_MODE (shard_transfer_mode of the rebalance and the move: force_logical (default),
# block_writes or auto — auto fails: `events` has no primary key or replica identity),
# APIARY_ISOLATE_MODE (the isolation's: block_writes (default); force_logical or auto can hang while
# batches update the tenant's shard group — Citus 13.2.2 creates the new shards' replica identities
# after its replication slot, so an UPDATE decoded in between cannot be applied; cancelled after
# 180 s here. See docs/scaling.md, "Citus"), APIARY_KEEP_CLUSTER=1 (leave the cluster running at the end; otherwise it
# is stopped, its data kept in the cluster directory), APIARY_INGEST_BIN (else built with cargo).
# The ingest's log is left in the cluster directory (serve.log).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
export APIARY_CITUS_DIR=${APIARY_CITUS_DIR:-$ROOT/target/citus-rebalance}
export APIARY_CITUS_PORT_BASE=${APIARY_CITUS_PORT_BASE:-26532}
TENANTS=${APIARY_REBALANCE_TENANTS:-6}
BATCHES=${APIARY_REBALANCE_BATCHES:-20}
EVENTS=${APIARY_REBALANCE_EVENTS:-50}
MODE=${APIARY_REBALANCE_MODE:-force_logical}
ISOLATE_MODE=${APIARY_ISOLATE_MODE:-block_writes}
WORK=$(mktemp -d)
: >"$WORK/retries"
SERVER_PID=
WRITER_PID=

log() { printf 'rebalance-check: %s\n' "$*" >&2; }
fail() {
    log "FAILED: $*"
    exit 1
}
cleanup() {
    [ ! -f "$WORK/serve.log" ] || cp "$WORK/serve.log" "$APIARY_CITUS_DIR/serve.log"
    [ -z "$WRITER_PID" ] || kill "$WRITER_PID" 2>/dev/null || true
    [ -z "$SERVER_PID" ] || kill "$SERVER_PID" 2>/dev/null || true
    wait 2>/dev/null || true
    if [ "${APIARY_KEEP_CLUSTER:-}" != 1 ]; then
        "$ROOT/scripts/citus.sh" stop || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

# Runs "$@", logs its duration in seconds (with milliseconds).
timed() {
    local what=$1 t0 t1
    shift
    t0=$(date +%s.%N)
    "$@"
    t1=$(date +%s.%N)
    log "$(printf '%-58s %7.2f s' "$what" "$(echo "$t1 - $t0" | bc)")"
}

q() { psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$DATABASE_URL" "$@" </dev/null; }

# --- 1. cluster, database, binary, tenants, server -------------------------------------------------
"$ROOT/scripts/citus.sh" destroy >&2
eval "$("$ROOT/scripts/citus.sh" start)"
COORD=${APIARY_CITUS_PORTS%% *}
BASE_URL="postgres://postgres@127.0.0.1:$COORD"
psql -X -q -d "$BASE_URL/postgres" -c "CREATE DATABASE apiary" </dev/null
APIARY_CITUS_LIB=1 . "$ROOT/scripts/citus.sh"
read -r -a NODE_PORTS <<<"$APIARY_CITUS_PORTS"
apiary_citus_prepare_db apiary "${NODE_PORTS[@]}"
export DATABASE_URL="$BASE_URL/apiary"

if [ -n "${APIARY_INGEST_BIN:-}" ]; then
    BIN=$APIARY_INGEST_BIN
else
    log "building apiary-ingest"
    (cd "$ROOT" && cargo build -p apiary-ingest --bin apiary-ingest --locked --quiet >&2)
    BIN=${CARGO_TARGET_DIR:-$ROOT/target}/debug/apiary-ingest
fi
timed "apiary-ingest migrate --citus" "$BIN" migrate --citus 2>/dev/null

declare -a TID INGEST READ
for ((t = 0; t < TENANTS; t++)); do
    TID[t]=$("$BIN" tenant create --name "tenant$t" 2>/dev/null | tail -n 1)
    INGEST[t]=$("$BIN" token create --tenant "${TID[t]}" --scope ingest 2>/dev/null | tail -n 1)
    READ[t]=$("$BIN" token create --tenant "${TID[t]}" --scope read 2>/dev/null | tail -n 1)
done

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
API="http://127.0.0.1:$PORT"
APIARY_LOG_FORMAT=text RUST_LOG=warn "$BIN" serve --listen "127.0.0.1:$PORT" >"$WORK/serve.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 100); do
    curl -sf "$API/readyz" >/dev/null 2>&1 && break
    sleep 0.1
done
curl -sf "$API/readyz" >/dev/null || fail "the ingest did not become ready: $(tail -n 5 "$WORK/serve.log")"

# --- batches -----------------------------------------------------------------------------------------
uuid() { cat /proc/sys/kernel/random/uuid; }

# post TENANT MODEL BATCH_NO HOURS_AGO: one batch of $EVENTS turns; adds its input tokens and events to
# $WORK/sent.TENANT.MODEL ("tokens events"); fails unless every event is stored (accepted, or a
# duplicate after a retry whose first try had committed).
post() {
    local t=$1 model=$2 b=$3 ago=$4 at events="" e input sum=0 body resp
    at=$(date -u -d "-$ago hours" +%Y-%m-%dT%H:%M:%SZ)
    for ((e = 0; e < EVENTS; e++)); do
        input=$((1000 + t * 7 + b * 3 + e))
        sum=$((sum + input))
        events+="${events:+,}{\"schema_version\":1,\"event_id\":\"$(uuid)\",\"type\":\"llm.turn\",\"occurred_at\":\"$at\",\"runtime\":\"hive\",\"native_type\":\"llm_turn_complete\",\"session_id\":\"s$t-$model-$((b % 4))\",\"agent_role\":\"queen\",\"data\":{\"model\":\"$model\",\"input_tokens\":$input,\"output_tokens\":$((input / 10)),\"cached_tokens\":0,\"cost_usd\":0.001,\"cost_source\":\"reported\"}}"
    done
    body="{\"schema_version\":1,\"batch_id\":\"$(uuid)\",\"sent_at\":\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\",\"agent\":{\"device_id\":\"dev$t-$((b % 3))\",\"agent_version\":\"0.1.0\"},\"policy_hash\":\"check\",\"sessions\":[],\"events\":[$events]}"
    # Like the agent: 408, 429 and 5xx are retried (the same batch: dedup makes a retry harmless);
    # every retry is recorded in $WORK/retries with the answer.
    local try code got
    for try in 1 2 3 4 5 6 7 8 9 10; do
        resp=$(curl -sS --max-time 120 -H "Authorization: Bearer ${INGEST[t]}" -H 'content-type: application/json' \
            --data-binary "$body" -w '\n%{http_code}' "$API/v1/batches") || resp=$'curl failed\n000'
        code=${resp##*$'\n'}
        case $code in
            200) break ;;
            000 | 408 | 429 | 5??)
                echo "tenant $t batch $b ($model) try $try: $code ${resp%$'\n'*}" >>"$WORK/retries"
                sleep 0.5
                ;;
            *) log "tenant $t batch $b: ${resp//$'\n'/ }"; return 1 ;;
        esac
    done
    [ "$code" = 200 ] || { log "tenant $t batch $b: still ${resp//$'\n'/ } after 10 tries"; return 1; }
    got=$(jq -r '.accepted + .duplicates' <<<"${resp%$'\n'*}")
    [ "$got" = "$EVENTS" ] || { log "tenant $t batch $b: ${resp%$'\n'*}"; return 1; }
    local f=$WORK/sent.$t.$model tok=0 n=0
    [ ! -f "$f" ] || read -r tok n <"$f"
    echo "$((tok + sum)) $((n + EVENTS))" >"$f"
}

# load TENANT MODEL N: N batches, over the last 3 days.
load() {
    local t=$1 model=$2 n=$3 b
    for ((b = 0; b < n; b++)); do
        post "$t" "$model" "$b" $(((b % 3) * 24 + 1)) || return 1
    done
}

load_all() {
    local t pids=()
    for ((t = 0; t < TENANTS; t++)); do
        if [ "$t" -eq 0 ]; then load 0 m1 $((BATCHES * 5)) & else load "$t" m1 "$BATCHES" & fi
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || return 1; done
}

# usage TENANT: the tenant's m1 rows by day (sorted JSON).
usage_m1() {
    curl -sSf -H "Authorization: Bearer ${READ[$1]}" \
        "$API/v1/usage?group_by=model&granularity=day&from=$(date -u -d '-5 days' +%F)T00:00:00Z" |
        jq -S -c '[.rows[] | select(.model == "m1")] | sort_by(.bucket)'
}

# check STEP: m1 rows equal the recorded ones; totals (all models) equal what was sent.
check() {
    local step=$1 t now f tok n want_tok want_n got
    for ((t = 0; t < TENANTS; t++)); do
        now=$(usage_m1 "$t")
        [ "$now" = "$(cat "$WORK/m1.$t")" ] || fail "$step: tenant $t's m1 usage changed: before $(cat "$WORK/m1.$t") after $now"
        want_tok=0 want_n=0
        for f in "$WORK"/sent."$t".*; do
            read -r tok n <"$f"
            want_tok=$((want_tok + tok)) want_n=$((want_n + n))
        done
        got=$(curl -sSf -H "Authorization: Bearer ${READ[t]}" \
            "$API/v1/usage?granularity=total&from=$(date -u -d '-5 days' +%F)T00:00:00Z" |
            jq -r '"\(.totals.input_tokens) \(.totals.llm_calls)"')
        [ "$got" = "$want_tok $want_n" ] || fail "$step: tenant $t's totals are $got, sent $want_tok $want_n"
    done
    log "$step: usage of all $TENANTS tenants exact (m1 rows unchanged, totals = sent)"
}

placement() {
    q -c "SELECT format('  node %s: %s shards of event_keys', nodeport, count(*))
          FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid) JOIN pg_dist_node n USING (groupid)
          WHERE s.logicalrelid = 'event_keys'::regclass GROUP BY nodeport ORDER BY nodeport" >&2
}

retries_since() { # retries recorded after line $1 of $WORK/retries, with their answers
    local n
    n=$(($(wc -l <"$WORK/retries") - $1))
    if [ "$n" -gt 0 ]; then
        echo "$n ($(tail -n "$n" "$WORK/retries" | sed -E 's/^.*try [0-9]+: //' | cut -c1-120 | sort | uniq -c | sed -E 's/^ +//' | paste -sd ';'))"
    else
        echo 0
    fi
}

# --- 2. load -----------------------------------------------------------------------------------------
timed "load: $TENANTS tenants, $((BATCHES * (TENANTS + 4))) batches of $EVENTS events" load_all ||
    fail "a batch was not accepted"
for ((t = 0; t < TENANTS; t++)); do usage_m1 "$t" >"$WORK/m1.$t"; done
check "after the load"
log "retried answers during the load: $(retries_since 0)"
log "events: $(q -c 'SELECT count(*) FROM events'), tenant 0 (big): ${TID[0]}; placement before:"
placement

# --- 3. a third worker, rebalance under writes -------------------------------------------------------
timed "scripts/citus.sh add-worker" "$ROOT/scripts/citus.sh" add-worker >"$WORK/env"
eval "$(grep -v DATABASE_URL "$WORK/env")"
read -r -a NODE_PORTS <<<"$APIARY_CITUS_PORTS"
NEW=${NODE_PORTS[${#NODE_PORTS[@]} - 1]}

# writer: every tenant posts (model m-during) until $WORK/writing goes away.
writer() {
    local b=0 t
    while [ -f "$WORK/writing" ]; do
        for ((t = 0; t < TENANTS; t++)); do
            post "$t" m-during "$b" 0 || { touch "$WORK/writer-failed"; return 1; }
        done
        b=$((b + 1))
    done
}
sent_during() { # events the writer got accepted so far
    local f n=0 tok e
    for f in "$WORK"/sent.*.m-during; do
        [ -f "$f" ] || continue
        read -r tok e <"$f"
        n=$((n + e))
    done
    echo "$n"
}
during_writes() { # WHAT CMD...: runs CMD (timed) while the writer posts; fails if a batch was refused
    local what=$1 before after
    shift
    before=$(sent_during)
    local r0
    r0=$(wc -l <"$WORK/retries")
    touch "$WORK/writing"
    writer &
    WRITER_PID=$!
    timed "$what" "$@"
    rm -f "$WORK/writing"
    wait "$WRITER_PID" || true
    WRITER_PID=
    [ ! -f "$WORK/writer-failed" ] || fail "a batch posted during '$what' was not accepted"
    after=$(sent_during)
    log "  batches posted (and stored) meanwhile: $(((after - before) / EVENTS)), retried answers: $(retries_since "$r0")"
}
rebalance() {
    q -c "SELECT citus_rebalance_start(shard_transfer_mode => '$MODE')" >/dev/null
    q -c "SELECT citus_rebalance_wait()" >/dev/null
}
during_writes "citus_rebalance_start('$MODE') + citus_rebalance_wait()" rebalance
log "rebalance job: $(q -c "SELECT format('%s, %s', state, details->'task_state_counts') FROM citus_rebalance_status()")"
placement
[ "$(q -c "SELECT count(*) FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid) WHERE n.nodeport = $NEW")" -gt 0 ] ||
    fail "the rebalance moved no shard to the new worker"
check "after the rebalance"

# --- 4. isolate the big tenant, move it to the new worker --------------------------------------------
# (statement_timeout: a non-blocking split that cannot finish waits forever; see the header)
isolate() {
    ISOLATED=$(q -c "SET statement_timeout = '180s'" -c "SELECT isolate_tenant_to_new_shard('event_keys',
        '${TID[0]}', 'CASCADE', shard_transfer_mode => '$ISOLATE_MODE')") ||
        fail "isolate_tenant_to_new_shard ($ISOLATE_MODE) did not finish within 180 s (cancelled; Citus cleans up)"
}
during_writes "isolate_tenant_to_new_shard(event_keys, tenant 0, CASCADE, '$ISOLATE_MODE')" isolate
log "tenant 0's new shard of event_keys: $ISOLATED ($(q -c "SELECT format('hash range %s..%s, %s tables in its group', shardminvalue, shardmaxvalue,
        (SELECT count(*) FROM pg_dist_shard s2 WHERE s2.shardminvalue = s.shardminvalue AND s2.shardmaxvalue = s.shardmaxvalue))
    FROM pg_dist_shard s WHERE shardid = $ISOLATED"))"
check "after the isolation"
# Tenant 0's shard group to a worker of its own: the new one, or, when the rebalance already put it
# there, the first worker (the point is to try the move).
FROM_PORT=$(q -c "SELECT nodeport FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid) WHERE shardid = $ISOLATED")
TO_PORT=$NEW
[ "$FROM_PORT" != "$NEW" ] || TO_PORT=${NODE_PORTS[1]}
move() {
    q -c "SELECT citus_move_shard_placement($ISOLATED, '127.0.0.1', $FROM_PORT, '127.0.0.1', $TO_PORT, shard_transfer_mode => '$MODE')" >/dev/null
}
during_writes "citus_move_shard_placement(tenant 0's group $FROM_PORT -> $TO_PORT)" move
log "tenant 0 now on node $(q -c "SELECT nodeport FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid) WHERE shardid = get_shard_id_for_distribution_column('event_keys', '${TID[0]}')")"
placement
check "after moving tenant 0"
DAY=$(date -u -d '+6 days' +%F)
q -c "SELECT apiary_ensure_event_partitions('$DAY', '$DAY')" >/dev/null
[ "$(q -c "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'events_${DAY//-/}'::regclass")" = \
    "$(q -c "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'event_keys'::regclass")" ] ||
    fail "a partition created after the isolation does not have the shards of event_keys"
log "a partition created after the isolation (events_${DAY//-/}) has the same shards as event_keys"

# --- 5. tenant 0 writes again --------------------------------------------------------------------------
timed "tenant 0 posts 10 more batches" load 0 m-after 10 || fail "tenant 0's batch was not accepted after the isolation"
check "after tenant 0 wrote again"
log "retried answers in all: $(retries_since 0)"
log "OK: rebalance ($MODE) and isolation of tenant 0 kept every tenant's usage exact, writes accepted throughout"
