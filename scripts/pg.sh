# shellcheck shell=bash
# scripts/pg.sh: make a PostgreSQL server reachable for Apiary's tests and demo.
#
# Sourced (the usual way; defines the functions below and runs apiary_pg_ensure):
#     . scripts/pg.sh || exit 1
#     trap apiary_pg_stop EXIT
# Sourced with APIARY_PG_LIB=1: defines the functions only, starts nothing (scripts/citus.sh).
# Run as a command:
#     scripts/pg.sh start   ensure a server, print `export ...` lines on stdout
#                           (use: eval "$(scripts/pg.sh start)")
#     scripts/pg.sh env     print `export ...` lines for a server that already answers
#                           (DATABASE_URL, 127.0.0.1:5432, or a running cluster in $APIARY_PG_DIR);
#                           never starts anything
#     scripts/pg.sh stop    stop the private cluster named by $APIARY_PG_DATA (as exported by
#                           `start`) or by $APIARY_PG_DIR; removes it if it was a temp cluster
#     scripts/pg.sh bins    make sure initdb/pg_ctl/postgres/psql exist (apt-get installs
#                           postgresql if needed) and print their directory
#
# Order of preference (apiary_pg_ensure):
#   (a) $DATABASE_URL, if set and it answers `select 1`;
#   (b) postgres://postgres@127.0.0.1:5432/postgres, if it answers;
#   (c) a private cluster: initdb (trust auth, user postgres) into $APIARY_PG_DIR if set (kept and
#       reused across runs), else into a fresh temp dir (fsync=off, removed by apiary_pg_stop);
#       listens on 127.0.0.1 on the first free port from 25432 (below Linux's
#       ephemeral range, where an outgoing connection can take a probed port before the bind); unix socket inside the cluster dir.
#       Layout of the cluster dir: data/ (PGDATA), run/ (socket), postgres.log, initdb.log.
#       Preloads pg_stat_statements where the server ships it (the write-cost guard reads it).
#       As root, initdb/pg_ctl run as user `postgres` (or a created system user `apiary-pg`).
#
# Inputs (environment):
#   DATABASE_URL             tried first (a)
#   APIARY_PG_DIR            cluster directory for (c); relative paths are resolved against $PWD
#   APIARY_PG_FORCE_PRIVATE  =1: skip (a) and (b), always use a private cluster
#   APIARY_PG_PORT_BASE      first port probed for (c) (default 25432)
# Outputs (exported):
#   DATABASE_URL             URL of an existing database whose role may CREATE DATABASE
#   APIARY_PG_SOURCE         env | local | private
#   APIARY_PG_STARTED        1 if this invocation started a private cluster, else 0
#   APIARY_PG_BASE           cluster directory            (private only)
#   APIARY_PG_DATA           its PGDATA (= $APIARY_PG_BASE/data)      (private only)
#   APIARY_PG_PORT           its TCP port                  (private only)
#   APIARY_PG_TEMP           1 if the cluster dir is a temp dir to delete on stop (private only)
# Functions: apiary_pg_ensure, apiary_pg_stop, apiary_pg_bins, apiary_pg_print_env
#
# Safe under `set -euo pipefail` in the caller; never `exit`s a sourcing shell. Progress goes to
# stderr, prefixed with "pg.sh:".

_apiary_pg_log() { printf 'pg.sh: %s\n' "$*" >&2; }

# Run a command as the user that owns the cluster (initdb and postgres refuse to run as root).
# Runs from / so that an unreadable caller cwd does not bother initdb/pg_ctl.
_apiary_pg_as() {
    local user=$1
    shift
    if [ "$(id -u)" -eq 0 ]; then
        (cd / && runuser -u "$user" -- "$@")
    else
        (cd / && "$@")
    fi
}

# Pick (and if needed create) the user that runs the cluster; prints the name.
_apiary_pg_user() {
    if [ "$(id -u)" -ne 0 ]; then
        id -un
        return 0
    fi
    if id -u postgres >/dev/null 2>&1; then
        echo postgres
        return 0
    fi
    if ! id -u apiary-pg >/dev/null 2>&1; then
        _apiary_pg_log "creating system user apiary-pg"
        if ! useradd --system --no-create-home --home-dir / --shell /usr/sbin/nologin apiary-pg >&2; then
            _apiary_pg_log "error: could not create user apiary-pg"
            return 1
        fi
    fi
    echo apiary-pg
}

# Does the server at URL answer? (never prompts for a password)
_apiary_pg_answers() {
    local url=$1
    if command -v psql >/dev/null 2>&1; then
        PGCONNECT_TIMEOUT=5 psql -w -X -q -A -t -d "$url" -c 'select 1' </dev/null >/dev/null 2>&1
    elif command -v pg_isready >/dev/null 2>&1; then
        PGCONNECT_TIMEOUT=5 pg_isready -q -d "$url" </dev/null >/dev/null 2>&1
    else
        return 2
    fi
}

# Can the role of URL create databases? Unknown (no psql) counts as yes.
_apiary_pg_can_createdb() {
    local url=$1 out
    command -v psql >/dev/null 2>&1 || return 0
    out=$(PGCONNECT_TIMEOUT=5 psql -w -X -q -A -t -d "$url" \
        -c 'select rolcreatedb or rolsuper from pg_roles where rolname = current_user' </dev/null 2>/dev/null) || return 1
    [ "$out" = t ]
}

# Make initdb, pg_ctl, postgres, psql and pg_isready available on PATH; install postgresql with
# apt-get if they are nowhere. Prints nothing on stdout.
apiary_pg_bins() {
    local d best=""
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 \
        && command -v postgres >/dev/null 2>&1 && command -v psql >/dev/null 2>&1; then
        return 0
    fi
    _apiary_pg_find_libdir() {
        # highest major version that has the server binaries
        best=$(for d in /usr/lib/postgresql/*/bin; do
            [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ] && echo "$d"
        done | sort -V | tail -n 1) || true
    }
    _apiary_pg_find_libdir
    if [ -z "$best" ]; then
        if [ "$(id -u)" -ne 0 ]; then
            _apiary_pg_log "error: PostgreSQL server binaries not found and not root; install postgresql (e.g. apt-get install postgresql)"
            return 1
        fi
        if ! command -v apt-get >/dev/null 2>&1; then
            _apiary_pg_log "error: PostgreSQL server binaries not found and apt-get is unavailable"
            return 1
        fi
        _apiary_pg_log "PostgreSQL binaries not found; installing postgresql with apt-get (takes a minute)"
        if ! DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update -qq </dev/null >&2; then
            _apiary_pg_log "error: apt-get update failed"
            return 1
        fi
        if ! DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
            --no-install-recommends postgresql postgresql-client </dev/null >&2; then
            _apiary_pg_log "error: apt-get install postgresql failed"
            return 1
        fi
        _apiary_pg_find_libdir
        if [ -z "$best" ]; then
            _apiary_pg_log "error: postgresql installed but no /usr/lib/postgresql/*/bin/initdb found"
            return 1
        fi
    fi
    case ":$PATH:" in
        *":$best:"*) ;;
        *) PATH="$best:$PATH"; export PATH ;;
    esac
    _apiary_pg_log "using PostgreSQL binaries from $best"
    return 0
}

# Is 127.0.0.1:PORT taken: something listening there, or an open connection using it as its local end
# (an ephemeral port of some client — the kernel hands them out from 32768 up, and a server cannot bind
# a port such a connection holds: seen with a RabbitMQ node's link to epmd sitting on 56432)? Sockets a
# stopped server left closing (TIME_WAIT, FIN_WAIT) do not count: Postgres binds with SO_REUSEADDR, so
# a server restarted on its port (tests/tests/faults.rs) gets it back.
_apiary_pg_port_busy() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    if command -v ss >/dev/null 2>&1; then
        [ -n "$(ss -Htan state established state syn-sent "sport = :$1" 2>/dev/null)" ] && return 0
    fi
    return 1
}

_apiary_pg_free_port() {
    local port=$1 tries=0
    while [ "$tries" -lt 200 ]; do
        if ! _apiary_pg_port_busy "$port"; then
            echo "$port"
            return 0
        fi
        port=$((port + 1))
        tries=$((tries + 1))
    done
    _apiary_pg_log "error: no free port in $1..$port"
    return 1
}

_apiary_pg_set_private_env() {
    APIARY_PG_SOURCE=private
    APIARY_PG_BASE=$1
    APIARY_PG_DATA=$1/data
    APIARY_PG_PORT=$2
    DATABASE_URL="postgres://postgres@127.0.0.1:$2/postgres"
    export DATABASE_URL APIARY_PG_SOURCE APIARY_PG_BASE APIARY_PG_DATA APIARY_PG_PORT
}

# Port of a running cluster in DATA (line 4 of postmaster.pid), if pg_ctl says it runs.
_apiary_pg_running_port() {
    local user=$1 data=$2 port
    [ -f "$data/postmaster.pid" ] || return 1
    _apiary_pg_as "$user" pg_ctl -D "$data" status >/dev/null 2>&1 || return 1
    port=$(sed -n 4p "$data/postmaster.pid" 2>/dev/null) || return 1
    case "$port" in '' | *[!0-9]*) return 1 ;; esac
    echo "$port"
}

# (c): start (or reuse) a private cluster.
_apiary_pg_private() {
    local user base data temp=0 port attempt log sockdir seen newlog
    apiary_pg_bins || return 1
    user=$(_apiary_pg_user) || return 1

    if [ -n "${APIARY_PG_DIR:-}" ]; then
        if ! mkdir -p "$APIARY_PG_DIR"; then
            _apiary_pg_log "error: cannot create APIARY_PG_DIR=$APIARY_PG_DIR"
            return 1
        fi
        base=$(cd "$APIARY_PG_DIR" && pwd -P) || return 1
    else
        temp=1
        base=$(mktemp -d "${TMPDIR:-/tmp}/apiary-pg.XXXXXX" 2>/dev/null) || base=""
        if [ -n "$base" ] && [ "$(id -u)" -eq 0 ]; then
            chown "$user" "$base" 2>/dev/null
            if ! runuser -u "$user" -- test -w "$base" 2>/dev/null; then
                # e.g. TMPDIR under /root: not traversable by $user
                rmdir "$base" 2>/dev/null
                base=""
            fi
        fi
        if [ -z "$base" ]; then
            base=$(mktemp -d /tmp/apiary-pg.XXXXXX) || return 1
        fi
    fi
    data=$base/data
    sockdir=$base/run
    log=$base/postgres.log

    if [ "$(id -u)" -eq 0 ]; then
        mkdir -p "$sockdir" || return 1
        chown "$user" "$base" "$sockdir" || return 1
        [ ! -e "$log" ] || chown "$user" "$log" || return 1
        if [ -d "$data" ] && [ "$(stat -c %U "$data")" != "$user" ]; then
            chown -R "$user" "$data" || return 1
        fi
        if ! runuser -u "$user" -- test -w "$base" 2>/dev/null; then
            _apiary_pg_log "error: $base is not reachable by user $user (a parent directory is not traversable);"
            _apiary_pg_log "       choose another APIARY_PG_DIR or chmod o+x its parents"
            return 1
        fi
    else
        mkdir -p "$sockdir" || return 1
    fi

    # Reuse a cluster that already runs in this dir (e.g. left running by an earlier demo run).
    if [ "$temp" = 0 ] && port=$(_apiary_pg_running_port "$user" "$data") \
        && _apiary_pg_answers "postgres://postgres@127.0.0.1:$port/postgres"; then
        _apiary_pg_log "private cluster in $base already running on port $port; using it"
        _apiary_pg_set_private_env "$base" "$port"
        APIARY_PG_TEMP=0
        export APIARY_PG_TEMP
        return 0
    fi

    if [ -f "$data/PG_VERSION" ]; then
        _apiary_pg_log "reusing cluster in $data"
    else
        if [ -d "$data" ] && [ -n "$(ls -A "$data" 2>/dev/null)" ]; then
            _apiary_pg_log "error: $data exists, is not empty and is not a cluster"
            return 1
        fi
        _apiary_pg_log "initdb $data (as $user)"
        local -a initdb_opts=(-D "$data" -U postgres -A trust -E UTF8 --no-locale)
        [ "$temp" = 1 ] && initdb_opts+=(--no-sync)
        if ! _apiary_pg_as "$user" initdb "${initdb_opts[@]}" >"$base/initdb.log" 2>&1; then
            _apiary_pg_log "error: initdb failed:"
            tail -n 20 "$base/initdb.log" >&2
            [ "$temp" = 1 ] && rm -rf "$base"
            return 1
        fi
        {
            echo
            echo "# added by scripts/pg.sh (port is given on the pg_ctl command line)"
            echo "listen_addresses = '127.0.0.1'"
            # sun_path is limited to 107 bytes; fall back to TCP only for very long paths
            if [ ${#sockdir} -lt 90 ]; then
                echo "unix_socket_directories = '$sockdir'"
            else
                echo "unix_socket_directories = ''"
            fi
            echo "max_connections = 200"
            # Statement statistics (buffers per statement) for the write path's counts
            # (ingest/tests/write_costs.rs), where the extension ships with the server.
            if [ -f "$(dirname "$(readlink -f "$(command -v postgres)")")/../lib/pg_stat_statements.so" ]; then
                echo "shared_preload_libraries = 'pg_stat_statements'"
            fi
            if [ "$temp" = 1 ]; then
                echo "fsync = off"
                echo "synchronous_commit = off"
                echo "full_page_writes = off"
            fi
        } >>"$data/postgresql.conf" || return 1
    fi

    attempt=0
    port=${APIARY_PG_PORT_BASE:-25432}
    while :; do
        attempt=$((attempt + 1))
        port=$(_apiary_pg_free_port "$port") || return 1
        _apiary_pg_log "starting private cluster on 127.0.0.1:$port (log: $log)"
        seen=0
        [ ! -f "$log" ] || seen=$(wc -l <"$log") || seen=0
        if _apiary_pg_as "$user" pg_ctl -D "$data" -l "$log" -w -t 60 -o "-p $port" start >/dev/null 2>&1; then
            break
        fi
        # only look at what this attempt wrote to the (possibly reused) log
        newlog=$(tail -n "+$((seen + 1))" "$log" 2>/dev/null) || newlog=""
        if [ "$attempt" -lt 5 ] && grep -q -e 'Address already in use' -e 'could not create any TCP/IP sockets' \
            -e 'could not create lock file' <<<"$newlog"; then
            _apiary_pg_log "port $port was taken meanwhile; trying another"
            port=$((port + 1))
            continue
        fi
        _apiary_pg_log "error: pg_ctl start failed; last lines of $log:"
        tail -n 20 "$log" >&2 2>/dev/null
        [ "$temp" = 1 ] && rm -rf "$base"
        return 1
    done

    _apiary_pg_set_private_env "$base" "$port"
    APIARY_PG_STARTED=1
    APIARY_PG_TEMP=$temp
    export APIARY_PG_STARTED APIARY_PG_TEMP
    if ! _apiary_pg_answers "$DATABASE_URL"; then
        _apiary_pg_log "error: cluster started but $DATABASE_URL does not answer"
        apiary_pg_stop
        return 1
    fi
    return 0
}

# Make a server reachable and export DATABASE_URL (see header).
apiary_pg_ensure() {
    local local_url="postgres://postgres@127.0.0.1:5432/postgres"
    APIARY_PG_STARTED=0
    export APIARY_PG_STARTED
    unset APIARY_PG_BASE APIARY_PG_DATA APIARY_PG_PORT APIARY_PG_TEMP

    if [ "${APIARY_PG_FORCE_PRIVATE:-0}" != 1 ]; then
        if ! command -v psql >/dev/null 2>&1 && ! command -v pg_isready >/dev/null 2>&1; then
            apiary_pg_bins || return 1
        fi
        if [ -n "${DATABASE_URL:-}" ]; then
            if _apiary_pg_answers "$DATABASE_URL"; then
                _apiary_pg_can_createdb "$DATABASE_URL" \
                    || _apiary_pg_log "warning: the role in DATABASE_URL may not CREATE DATABASE; tests need it"
                _apiary_pg_log "using DATABASE_URL from the environment"
                APIARY_PG_SOURCE="env"
                export APIARY_PG_SOURCE DATABASE_URL
                return 0
            fi
            _apiary_pg_log "DATABASE_URL is set but does not answer; ignoring it"
        fi
        if _apiary_pg_answers "$local_url" && _apiary_pg_can_createdb "$local_url"; then
            _apiary_pg_log "using the server on 127.0.0.1:5432"
            DATABASE_URL=$local_url
            APIARY_PG_SOURCE=local
            export DATABASE_URL APIARY_PG_SOURCE
            return 0
        fi
    fi
    _apiary_pg_private
}

# Stop the private cluster, but only if this script started it; removes temp clusters.
apiary_pg_stop() {
    local user data base
    if [ "${APIARY_PG_STARTED:-0}" != 1 ] || [ -z "${APIARY_PG_DATA:-}" ]; then
        return 0
    fi
    data=$APIARY_PG_DATA
    base=${APIARY_PG_BASE:-$(dirname "$data")}
    user=$(_apiary_pg_user) || return 1
    if [ -f "$data/postmaster.pid" ]; then
        _apiary_pg_log "stopping private cluster in $base"
        _apiary_pg_as "$user" pg_ctl -D "$data" -m fast -w -t 60 stop >/dev/null 2>&1 \
            || _apiary_pg_as "$user" pg_ctl -D "$data" -m immediate -w stop >/dev/null 2>&1 \
            || _apiary_pg_log "warning: could not stop the cluster in $data"
    fi
    if [ "${APIARY_PG_TEMP:-0}" = 1 ]; then
        case "$base" in
            */apiary-pg.*) rm -rf "$base" ;;
            *) _apiary_pg_log "warning: not removing unexpected temp dir $base" ;;
        esac
    fi
    APIARY_PG_STARTED=0
    if [ "${APIARY_PG_SOURCE:-}" = private ]; then
        unset DATABASE_URL
    fi
    unset APIARY_PG_BASE APIARY_PG_DATA APIARY_PG_PORT APIARY_PG_TEMP APIARY_PG_SOURCE
    return 0
}

# Print `export` lines for the current state (for eval).
apiary_pg_print_env() {
    local v
    for v in DATABASE_URL APIARY_PG_SOURCE APIARY_PG_STARTED APIARY_PG_BASE APIARY_PG_DATA APIARY_PG_PORT APIARY_PG_TEMP; do
        if [ -n "${!v+x}" ]; then
            printf 'export %s=%q\n' "$v" "${!v}"
        fi
    done
    case ":$PATH:" in
        *:/usr/lib/postgresql/*) printf 'export PATH=%q\n' "$PATH" ;;
    esac
}

_apiary_pg_main() {
    local cmd=${1:-}
    case "$cmd" in
        start)
            apiary_pg_ensure || return 1
            apiary_pg_print_env
            ;;
        env)
            local user port base
            if [ "${APIARY_PG_FORCE_PRIVATE:-0}" != 1 ] && [ -n "${DATABASE_URL:-}" ] \
                && _apiary_pg_answers "$DATABASE_URL"; then
                APIARY_PG_SOURCE="env"
            elif [ "${APIARY_PG_FORCE_PRIVATE:-0}" != 1 ] \
                && _apiary_pg_answers "postgres://postgres@127.0.0.1:5432/postgres"; then
                DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
                APIARY_PG_SOURCE=local
            elif [ -n "${APIARY_PG_DIR:-}" ] && [ -d "$APIARY_PG_DIR/data" ] \
                && base=$(cd "$APIARY_PG_DIR" && pwd -P) \
                && apiary_pg_bins 2>/dev/null && user=$(_apiary_pg_user) \
                && port=$(_apiary_pg_running_port "$user" "$base/data"); then
                _apiary_pg_set_private_env "$base" "$port"
            else
                _apiary_pg_log "no running server found (try: scripts/pg.sh start)"
                return 1
            fi
            export DATABASE_URL APIARY_PG_SOURCE
            apiary_pg_print_env
            ;;
        stop)
            if [ -z "${APIARY_PG_DATA:-}" ] && [ -n "${APIARY_PG_DIR:-}" ]; then
                APIARY_PG_DATA=$(cd "$APIARY_PG_DIR" && pwd -P)/data || return 1
                APIARY_PG_BASE=$(dirname "$APIARY_PG_DATA")
                APIARY_PG_STARTED=1
                APIARY_PG_TEMP=0
            fi
            if [ -z "${APIARY_PG_DATA:-}" ]; then
                _apiary_pg_log "nothing to stop (set APIARY_PG_DATA or APIARY_PG_DIR)"
                return 0
            fi
            # Explicit stop request: stop whatever runs in that data dir.
            APIARY_PG_STARTED=1
            apiary_pg_bins || return 1
            apiary_pg_stop
            ;;
        bins)
            apiary_pg_bins || return 1
            dirname "$(command -v initdb)"
            ;;
        *)
            echo "usage: scripts/pg.sh start|env|stop|bins   (or source it: . scripts/pg.sh)" >&2
            return 2
            ;;
    esac
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    # Executed as a command.
    set -u
    _apiary_pg_main "$@"
    exit $?
fi

# Sourced with APIARY_PG_LIB=1: only define the functions (scripts/citus.sh reuses them).
if [ "${APIARY_PG_LIB:-0}" = 1 ]; then
    return 0
fi

# Sourced: ensure a server now. Called inside `if` so a caller's `set -e` cannot abort midway.
if apiary_pg_ensure; then
    true
else
    _apiary_pg_log "error: no PostgreSQL available"
    return 1
fi
