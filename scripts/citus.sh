#!/usr/bin/env bash
# scripts/citus.sh: a local Citus cluster (a coordinator and 2 workers on the local host, a third or more
# added on demand) for Apiary's tests, benchmarks and demo.
#
#     scripts/citus.sh start   install Citus if it is missing (../shared/vendor/citus/build.sh, a few
#                              minutes once), initdb the three nodes (once), start them (and the workers
#                              add-worker added), prepare the coordinator's `postgres` database
#                              (extension, nodes registered), print `export ...` lines on stdout
#                              (use: eval "$(scripts/citus.sh start)")
#     scripts/citus.sh install only the first part of start: install Citus if it is missing (CI runs it
#                              in the background while the tests run)
#     scripts/citus.sh env     print the `export ...` lines of the running cluster; never starts anything
#     scripts/citus.sh add-worker
#                              with the cluster running: initdb and start one more worker (worker3, then
#                              worker4, ...) on the next free port, create every Citus database of the
#                              coordinator on it (the extension in each) and register it there
#                              (citus_add_node). It holds no shards until a rebalance moves some
#                              (SELECT citus_rebalance_start(); see scripts/citus-rebalance-check.sh).
#                              Prints the `export ...` lines.
#     scripts/citus.sh stop    stop every node (their data is kept for the next start)
#     scripts/citus.sh destroy stop them and delete the cluster directory
#
# Layout of the cluster directory ($APIARY_CITUS_DIR, default <repo>/target/citus):
#     ports                 "COORDINATOR WORKER1 WORKER2 [WORKER3 ...]", chosen at the first start (and
#                           by add-worker) and kept: the coordinator's metadata names the workers by port
#     coordinator/ worker1/ worker2/ [worker3/ ...]
#                           each: data/ (PGDATA), run/ (unix socket), postgres.log, initdb.log
# Ports: the first three consecutive free ports from $APIARY_CITUS_PORT_BASE (default 26432, below Linux's
# ephemeral range 32768-60999: a port in that range can be taken by any outgoing connection between the
# probe and the bind, which failed a CI run), on 127.0.0.1; an added worker takes the first free port above
# the highest one. If a node of a new cluster still finds its port taken when it starts, the ports are
# chosen again above it (up to 5 times); a cluster started before (ports recorded, workers registered by
# port) retries the same port every 2 s, 5 times, then `start` fails.
#
# Every node: trust authentication on 127.0.0.1 (initdb -A trust), `shared_preload_libraries = 'citus'`,
# `max_prepared_transactions` (Citus commits a transaction that wrote to several workers with two-phase
# commit), `wal_level = logical` (shard moves: citus_rebalance_start), `citus` added to
# `output_plugin_libraries` where the server has that setting (shard splits), fsync off unless
# APIARY_CITUS_FSYNC=on (a test cluster; set it on for measurements that compare with a durable server).
# The coordinator also has `citus.enable_create_database_propagation = on` (a CREATE DATABASE on it, as
# sqlx::test issues per test, creates the database on the workers too) and `citus.shard_count` =
# $APIARY_CITUS_SHARD_COUNT (default 4, at initdb: Citus' default 32 makes every distributed table and
# every daily events partition 32 tables, which slows a test suite that builds ~90 databases down a lot).
#
# TLS (decided here, see docs/scaling.md, "TLS between the nodes"): Citus' CREATE EXTENSION turns `ssl` on with a self-signed X.509
# v1 certificate when `citus.node_conninfo` asks for `sslmode=require` (its default); rustls (sqlx's TLS)
# refuses v1 certificates, so sqlx under the default `sslmode=prefer` fails to connect instead of falling
# back to plain text. This cluster listens on 127.0.0.1 only with trust authentication, where TLS protects
# nothing: every node runs with `ssl = off` and `citus.node_conninfo = 'sslmode=disable'` (so the
# extension leaves TLS off), and `start` checks that `ssl` is still off afterwards. The printed URL needs
# no sslmode. A production cluster should instead serve a CA-signed (v3) certificate and clients connect
# with sslmode=verify-full.
#
# Outputs (exported by `start` / `env`):
#     DATABASE_URL        the coordinator's `postgres` database (tests and `apiary-ingest migrate` use it)
#     APIARY_CITUS_DIR    the cluster directory
#     APIARY_CITUS_PORTS  "COORDINATOR WORKER1 WORKER2 [WORKER3 ...]"
#
# As root, the nodes run as user `postgres` (or `apiary-pg`), like scripts/pg.sh's private cluster.
# Progress goes to stderr, prefixed with "citus.sh:".
# Sourced with APIARY_CITUS_LIB=1: defines the functions only, runs nothing
# (scripts/citus-rebalance-check.sh).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
CITUS_BUILD=${APIARY_CITUS_BUILD:-$ROOT/../shared/vendor/citus/build.sh}
CITUS_VERSION=13.2.2

# The directory name of node I of the ports file: 0 the coordinator, I > 0 worker I.
_citus_node() {
    if [ "$1" -eq 0 ]; then echo coordinator; else echo "worker$1"; fi
}

# shellcheck source=scripts/pg.sh
APIARY_PG_LIB=1 . "$ROOT/scripts/pg.sh"

_citus_log() { printf 'citus.sh: %s\n' "$*" >&2; }

_citus_dir() {
    local d=${APIARY_CITUS_DIR:-$ROOT/target/citus}
    mkdir -p "$d" || return 1
    (cd "$d" && pwd -P)
}

# psql against node PORT (database DB, default postgres); extra args follow.
_citus_psql() {
    local port=$1 db=$2
    shift 2
    PGOPTIONS='-c client_min_messages=warning' PGCONNECT_TIMEOUT=10 psql -w -X -q -A -t -v ON_ERROR_STOP=1 \
        -d "postgres://postgres@127.0.0.1:$port/$db" "$@" </dev/null
}

# Is the Citus extension (this version) installed into the server binaries on PATH?
_citus_installed() {
    local libdir
    libdir=$(pg_config --pkglibdir 2>/dev/null) || return 1
    # grep the library itself: `strings | grep -q` fails under pipefail (SIGPIPE) even when it matches
    [ -f "$libdir/citus.so" ] && grep -q -a -F "Citus $CITUS_VERSION " "$libdir/citus.so" &&
        _elf_whole "$libdir/citus.so"
}

# Is FILE a whole ELF file? Its section headers come last, so a file cut short (an install that met a full
# disk) ends before them; such a library is taken for missing and built again.
_elf_whole() {
    python3 - "$1" <<'PY'
import struct, sys
with open(sys.argv[1], "rb") as f:
    data = f.read()
ok = len(data) >= 64 and data[:4] == b"\x7fELF" and data[4] == 2
if ok:
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    ok = shoff > 0 and shoff + shentsize * shnum <= len(data)
sys.exit(0 if ok else 1)
PY
}

_citus_install() {
    if _citus_installed; then
        return 0
    fi
    if [ ! -x "$CITUS_BUILD" ] && [ ! -f "$CITUS_BUILD" ]; then
        _citus_log "error: Citus is not installed and $CITUS_BUILD is missing (set APIARY_CITUS_BUILD)"
        return 1
    fi
    if [ "$(id -u)" -ne 0 ]; then
        _citus_log "error: Citus is not installed; run $CITUS_BUILD as root (it needs apt-get and make install)"
        return 1
    fi
    local t0=$SECONDS
    _citus_log "Citus $CITUS_VERSION is not installed: building it with $CITUS_BUILD (a few minutes)"
    if ! bash "$CITUS_BUILD" >&2; then
        _citus_log "error: $CITUS_BUILD failed"
        return 1
    fi
    _citus_log "Citus built and installed in $((SECONDS - t0)) s"
    _citus_installed || { _citus_log "error: build.sh finished but citus.so $CITUS_VERSION is not there"; return 1; }
}

# The recorded ports, or the first free three from the base (recorded).
_citus_ports() {
    local dir=$1 port base tries=0
    if [ -f "$dir/ports" ]; then
        cat "$dir/ports"
        return 0
    fi
    base=${APIARY_CITUS_PORT_BASE:-26432}
    port=$base
    while [ "$tries" -lt 100 ]; do
        if ! _apiary_pg_port_busy "$port" && ! _apiary_pg_port_busy $((port + 1)) \
            && ! _apiary_pg_port_busy $((port + 2)); then
            echo "$port $((port + 1)) $((port + 2))" >"$dir/ports" || return 1
            cat "$dir/ports"
            return 0
        fi
        port=$((port + 3))
        tries=$((tries + 1))
    done
    _citus_log "error: no three free consecutive ports from $base"
    return 1
}

# initdb one node (once) and append its settings.
_citus_init_node() {
    local user=$1 base=$2 role=$3
    local data=$base/data sockdir=$base/run
    mkdir -p "$sockdir" || return 1
    if [ "$(id -u)" -eq 0 ]; then
        chown "$user" "$base" "$sockdir" || return 1
        if ! runuser -u "$user" -- test -w "$base" 2>/dev/null; then
            _citus_log "error: $base is not reachable by user $user (chmod o+x its parents or set APIARY_CITUS_DIR)"
            return 1
        fi
    fi
    [ -f "$data/PG_VERSION" ] && return 0
    _citus_log "initdb $data (as $user)"
    if ! _apiary_pg_as "$user" initdb -D "$data" -U postgres -A trust -E UTF8 --no-locale --no-sync \
        >"$base/initdb.log" 2>&1; then
        _citus_log "error: initdb failed:"
        tail -n 20 "$base/initdb.log" >&2
        return 1
    fi
    local fsync=${APIARY_CITUS_FSYNC:-off}
    {
        echo
        echo "# added by scripts/citus.sh (the port is given on the pg_ctl command line)"
        echo "listen_addresses = '127.0.0.1'"
        if [ ${#sockdir} -lt 90 ]; then
            echo "unix_socket_directories = '$sockdir'"
        else
            echo "unix_socket_directories = ''"
        fi
        echo "shared_preload_libraries = 'citus'"
        echo "max_connections = 300"
        echo "max_prepared_transactions = 300"
        echo "wal_level = logical"
        echo "# TLS off on purpose (loopback, trust auth): see the header of scripts/citus.sh"
        echo "ssl = off"
        echo "citus.node_conninfo = 'sslmode=disable'"
        echo "fsync = $fsync"
        if [ "$fsync" = off ]; then
            echo "synchronous_commit = off"
            echo "full_page_writes = off"
        fi
        if [ "$role" = coordinator ]; then
            echo "citus.enable_create_database_propagation = on"
            echo "citus.shard_count = ${APIARY_CITUS_SHARD_COUNT:-4}"
        else
            # Every transaction starts on the coordinator here (no queries are sent to the workers
            # directly), so distributed deadlock detection and 2PC recovery — which the coordinator's
            # maintenance daemon runs for the transactions it coordinates — have nothing to do on a
            # worker. Left on, a worker's daemon keeps idle connections into every Citus database of
            # the other nodes, and DROP DATABASE (sqlx::test drops each test's database) fails with
            # "being accessed by other users".
            echo "citus.distributed_deadlock_detection_factor = -1"
            echo "citus.recover_2pc_interval = -1"
            echo "citus.max_cached_conns_per_worker = 0"
        fi
    } >>"$data/postgresql.conf" || return 1
}

# Start one node on PORT unless it already runs there.
_citus_start_node() {
    local user=$1 base=$2 port=$3
    local data=$base/data log=$base/postgres.log running
    if running=$(_apiary_pg_running_port "$user" "$data"); then
        if [ "$running" = "$port" ]; then
            return 0
        fi
        _citus_log "error: the node in $data runs on port $running, not $port; stop it first"
        return 1
    fi
    if _apiary_pg_port_busy "$port"; then
        _citus_log "port $port is taken (a server, or a connection's local end)"
        return 2
    fi
    local seen=0 newlog
    [ ! -f "$log" ] || seen=$(wc -l <"$log") || seen=0
    if ! _apiary_pg_as "$user" pg_ctl -D "$data" -l "$log" -w -t 60 -o "-p $port" start >/dev/null 2>&1; then
        # only what this attempt wrote to the (reused) log
        newlog=$(tail -n "+$((seen + 1))" "$log" 2>/dev/null) || newlog=""
        if grep -q -e 'Address already in use' -e 'could not create any TCP/IP sockets' <<<"$newlog"; then
            _citus_log "port $port was taken between the probe and the bind"
            return 2
        fi
        _citus_log "error: pg_ctl start failed; last lines of $log:"
        tail -n 20 "$log" >&2
        return 1
    fi
}

# Start every node of PORTS ("COORDINATOR WORKER1 ..."); returns 2 when a port was taken (see above).
_citus_start_nodes() {
    local user=$1 dir=$2 ports=$3 i rc
    read -r -a list <<<"$ports"
    for i in "${!list[@]}"; do
        _citus_start_node "$user" "$dir/$(_citus_node "$i")" "${list[$i]}"
        rc=$?
        [ "$rc" -eq 0 ] || return "$rc"
    done
}

# Stop the nodes of DIR that run (a failed first start's leftovers).
_citus_stop_nodes() {
    local user=$1 dir=$2 base
    for base in "$dir"/coordinator "$dir"/worker*; do
        [ -f "$base/data/postmaster.pid" ] || continue
        _apiary_pg_as "$user" pg_ctl -D "$base/data" -m fast -w -t 60 stop >/dev/null 2>&1 || true
    done
}

# The Citus extension in database DB of every node, the coordinator and the workers registered in the
# coordinator's DB. Idempotent.
apiary_citus_prepare_db() {
    local db=$1 coord=$2
    shift 2
    local port
    for port in "$coord" "$@"; do
        _citus_psql "$port" "$db" -c "CREATE EXTENSION IF NOT EXISTS citus" || return 1
    done
    _citus_psql "$coord" "$db" -c "SELECT citus_set_coordinator_host('127.0.0.1', $coord)" >/dev/null || return 1
    for port in "$@"; do
        _citus_psql "$coord" "$db" -c "SELECT citus_add_node('127.0.0.1', $port)
            WHERE NOT EXISTS (SELECT 1 FROM pg_dist_node WHERE nodename = '127.0.0.1' AND nodeport = $port)" \
            >/dev/null || return 1
    done
}

# PostgreSQL's minor releases of 2026 (15.20 here) refuse logical decoding output plugins that
# `output_plugin_libraries` does not list (default 'pgoutput, test_decoding'); Citus' shard split
# (isolate_tenant_to_new_shard, citus_split_shard_by_split_points) decodes with its own plugin, `citus`,
# and fails with 'library "citus" may not be used as an output plugin'. Lists it on node PORT when the
# server has that setting (older servers do not; nothing to do there). The library is loaded in every
# backend already (shared_preload_libraries). Idempotent.
_citus_allow_output_plugin() {
    local port=$1 current libs
    current=$(_citus_psql "$port" postgres -c \
        "SELECT setting FROM pg_settings WHERE name = 'output_plugin_libraries'") || return 1
    [ -n "$current" ] || return 0
    case ", $current," in *", citus,"*) return 0 ;; esac
    # a list: one quoted literal per library (one literal 'a, b' would be a single library "a, b")
    local list="" lib
    IFS=, read -r -a libs <<<"$current"
    for lib in "${libs[@]}" citus; do
        lib=${lib# }
        list+="${list:+, }'$lib'"
    done
    _citus_psql "$port" postgres -c "ALTER SYSTEM SET output_plugin_libraries = $list" \
        -c "SELECT pg_reload_conf()" >/dev/null || return 1
}

# Drops the databases sqlx::test left behind on every node (a failed test keeps its database, and a drop
# can lose a race with Citus' maintenance daemons), so a new run can reuse their names; workers first,
# each node locally (no propagation), WITH (FORCE).
_citus_drop_test_dbs() {
    local port db n=0
    for port in "$@"; do
        for db in $(_citus_psql "$port" postgres -c \
            "SELECT datname FROM pg_database WHERE datname LIKE '\_sqlx\_test\_%' ORDER BY 1"); do
            _citus_psql "$port" postgres -c "SET citus.enable_create_database_propagation = off" \
                -c "DROP DATABASE \"$db\" WITH (FORCE)" >/dev/null || return 1
            n=$((n + 1))
        done
    done
    if [ "$n" -gt 0 ]; then
        _citus_log "dropped $n leftover test databases"
    fi
    _citus_psql "${!#}" postgres -c "DELETE FROM _sqlx_test.databases
        WHERE db_name NOT IN (SELECT datname FROM pg_database)" >/dev/null 2>&1 || true
}

_citus_export() {
    local dir=$1 ports=$2
    DATABASE_URL="postgres://postgres@127.0.0.1:${ports%% *}/postgres"
    APIARY_CITUS_DIR=$dir
    APIARY_CITUS_PORTS=$ports
    export DATABASE_URL APIARY_CITUS_DIR APIARY_CITUS_PORTS
    printf 'export DATABASE_URL=%q\n' "$DATABASE_URL"
    printf 'export APIARY_CITUS_DIR=%q\n' "$APIARY_CITUS_DIR"
    printf 'export APIARY_CITUS_PORTS=%q\n' "$APIARY_CITUS_PORTS"
    case ":$PATH:" in *:/usr/lib/postgresql/*) printf 'export PATH=%q\n' "$PATH" ;; esac
}

apiary_citus_start() {
    local t0=$SECONDS dir user ports i port ssl
    apiary_pg_bins || return 1
    _citus_install || return 1
    dir=$(_citus_dir) || return 1
    user=$(_apiary_pg_user) || return 1
    [ "$(id -u)" -ne 0 ] || chown "$user" "$dir" || return 1
    # New when no ports are recorded yet: nothing names the workers by port, so they may be chosen again.
    local fresh=0 attempt=0 rc base_port
    [ -f "$dir/ports" ] || fresh=1
    ports=$(_citus_ports "$dir") || return 1
    read -r -a port_list <<<"$ports"
    for i in "${!port_list[@]}"; do
        _citus_init_node "$user" "$dir/$(_citus_node "$i")" "$(_citus_node "$i")" || return 1
    done
    while :; do
        attempt=$((attempt + 1))
        _citus_start_nodes "$user" "$dir" "$ports"
        rc=$?
        [ "$rc" -eq 0 ] && break
        if [ "$rc" -ne 2 ] || [ "$attempt" -ge 5 ]; then
            [ "$rc" -ne 2 ] || _citus_log "error: a port stayed taken after $attempt attempts (ports: $ports); stop what holds it, or delete $dir to pick new ports"
            return 1
        fi
        if [ "$fresh" = 1 ]; then
            _citus_stop_nodes "$user" "$dir"
            base_port=${ports##* }
            rm -f "$dir/ports"
            ports=$(APIARY_CITUS_PORT_BASE=$((base_port + 1)) _citus_ports "$dir") || return 1
            read -r -a port_list <<<"$ports"
            _citus_log "new cluster: ports chosen again: $ports"
        else
            sleep 2
        fi
    done
    for port in "${port_list[@]}"; do
        _citus_allow_output_plugin "$port" || return 1
    done
    apiary_citus_prepare_db postgres "${port_list[@]}" || return 1
    # workers first: a coordinator database's drop would otherwise propagate to them
    local reversed=()
    for ((i = ${#port_list[@]} - 1; i >= 0; i--)); do
        reversed+=("${port_list[$i]}")
    done
    _citus_drop_test_dbs "${reversed[@]}" || return 1
    for port in "${port_list[@]}"; do
        ssl=$(_citus_psql "$port" postgres -c "SHOW ssl") || return 1
        if [ "$ssl" != off ]; then
            _citus_log "error: ssl is '$ssl' on port $port; sqlx (rustls) cannot connect to Citus' v1 certificate"
            return 1
        fi
    done
    _citus_log "cluster in $dir up in $((SECONDS - t0)) s: coordinator 127.0.0.1:${port_list[0]}, workers ${port_list[*]:1}"
    _citus_export "$dir" "$ports"
}

apiary_citus_env() {
    local dir user ports
    apiary_pg_bins 2>/dev/null || return 1
    dir=${APIARY_CITUS_DIR:-$ROOT/target/citus}
    if [ ! -f "$dir/ports" ]; then
        _citus_log "no cluster in $dir (try: scripts/citus.sh start)"
        return 1
    fi
    dir=$(cd "$dir" && pwd -P) || return 1
    ports=$(cat "$dir/ports")
    if ! _apiary_pg_answers "postgres://postgres@127.0.0.1:${ports%% *}/postgres"; then
        _citus_log "the cluster in $dir is not running (try: scripts/citus.sh start)"
        return 1
    fi
    _citus_export "$dir" "$ports"
}

apiary_citus_stop() {
    local dir user base data
    apiary_pg_bins || return 1
    dir=${APIARY_CITUS_DIR:-$ROOT/target/citus}
    [ -d "$dir" ] || { _citus_log "nothing to stop: no $dir"; return 0; }
    user=$(_apiary_pg_user) || return 1
    # every node directory (also one add-worker created but did not record in `ports`)
    for base in "$dir"/coordinator "$dir"/worker*; do
        data=$base/data
        if [ -f "$data/postmaster.pid" ]; then
            _citus_log "stopping $(basename "$base")"
            _apiary_pg_as "$user" pg_ctl -D "$data" -m fast -w -t 60 stop >/dev/null 2>&1 \
                || _apiary_pg_as "$user" pg_ctl -D "$data" -m immediate -w stop >/dev/null 2>&1 \
                || { _citus_log "error: could not stop the node in $data"; return 1; }
        fi
    done
}

apiary_citus_destroy() {
    local dir=${APIARY_CITUS_DIR:-$ROOT/target/citus}
    apiary_citus_stop || return 1
    if [ -d "$dir" ]; then
        if [ ! -f "$dir/ports" ] && [ -n "$(ls -A "$dir")" ]; then
            _citus_log "error: $dir does not look like a cluster made by this script; not deleting it"
            return 1
        fi
        rm -rf "$dir" && _citus_log "deleted $dir"
    fi
}

# The coordinator's databases that have the citus extension (not templates, not test databases).
_citus_databases() {
    local coord=$1 db
    for db in $(_citus_psql "$coord" postgres -c "SELECT datname FROM pg_database
            WHERE datallowconn AND NOT datistemplate AND datname NOT LIKE '\_sqlx\_test\_%' ORDER BY 1"); do
        if [ "$(_citus_psql "$coord" "$db" -c "SELECT count(*) FROM pg_extension WHERE extname = 'citus'")" = 1 ]; then
            echo "$db"
        fi
    done
}

apiary_citus_add_worker() {
    local t0=$SECONDS dir user ports port p i name db
    apiary_pg_bins || return 1
    dir=${APIARY_CITUS_DIR:-$ROOT/target/citus}
    if [ ! -f "$dir/ports" ]; then
        _citus_log "no cluster in $dir (start one first: scripts/citus.sh start)"
        return 1
    fi
    dir=$(cd "$dir" && pwd -P) || return 1
    ports=$(cat "$dir/ports")
    read -r -a port_list <<<"$ports"
    if ! _apiary_pg_answers "postgres://postgres@127.0.0.1:${port_list[0]}/postgres"; then
        _citus_log "the cluster in $dir is not running (scripts/citus.sh start first)"
        return 1
    fi
    user=$(_apiary_pg_user) || return 1
    i=${#port_list[@]}
    name=$(_citus_node "$i")
    port=${port_list[0]}
    for p in "${port_list[@]}"; do
        [ "$p" -le "$port" ] || port=$p
    done
    port=$((port + 1))
    while _apiary_pg_port_busy "$port"; do
        port=$((port + 1))
    done
    _citus_init_node "$user" "$dir/$name" worker || return 1
    _citus_start_node "$user" "$dir/$name" "$port" || return 1
    _citus_allow_output_plugin "$port" || return 1
    echo "$ports $port" >"$dir/ports" || return 1
    port_list+=("$port")
    for db in $(_citus_databases "${port_list[0]}"); do
        if [ "$(_citus_psql "$port" postgres -c "SELECT count(*) FROM pg_database WHERE datname = '$db'")" = 0 ]; then
            _citus_psql "$port" postgres -c "CREATE DATABASE \"$db\"" >/dev/null || return 1
        fi
        apiary_citus_prepare_db "$db" "${port_list[@]}" || return 1
        _citus_log "database $db: $name (127.0.0.1:$port) registered"
    done
    _citus_log "$name up on 127.0.0.1:$port in $((SECONDS - t0)) s; it holds no shards until a rebalance (SELECT citus_rebalance_start())"
    _citus_export "$dir" "${port_list[*]}"
}

if [ "${APIARY_CITUS_LIB:-}" = 1 ]; then
    return 0 2>/dev/null || exit 0
fi

case "${1:-}" in
    start) apiary_citus_start ;;
    install) _citus_install ;;
    env) apiary_citus_env ;;
    add-worker) apiary_citus_add_worker ;;
    stop) apiary_citus_stop ;;
    destroy) apiary_citus_destroy ;;
    *)
        echo "usage: scripts/citus.sh start|install|env|add-worker|stop|destroy" >&2
        exit 2
        ;;
esac
