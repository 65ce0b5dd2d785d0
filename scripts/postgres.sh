#!/usr/bin/env bash
# Start, stop or describe a private PostgreSQL cluster for tests and CI (the multi-host mode).
#
#   scripts/postgres.sh start    # install PostgreSQL from Debian if missing, initdb, start, wait
#   scripts/postgres.sh stop     # stop the cluster this script started (by its pid)
#   scripts/postgres.sh env      # print `export PARITYBOT_TEST_DATABASE_URL=...` for eval
#   scripts/postgres.sh status   # exit 0 when the cluster answers
#
# Everything lives under $PARITYBOT_PG_DIR (default /tmp/paritybot-postgres-N, N a checksum of this
# checkout's path, so two checkouts never share or stop each other's): the data directory, the unix
# socket, the log and the port it chose. The cluster listens on a unix socket and on loopback at a
# free port, trusts local connections (it is a throwaway test cluster, never a deployment), and
# never touches a system cluster.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PG_DIR="${PARITYBOT_PG_DIR:-/tmp/paritybot-postgres-$(printf %s "$ROOT" | cksum | cut -d' ' -f1)}"
DATA="$PG_DIR/data"
SOCK_DIR="$PG_DIR/sock"
LOG="$PG_DIR/postgres.log"
PORT_FILE="$PG_DIR/port"
WAIT_S="${PARITYBOT_PG_WAIT_S:-60}"
DB="paritybot"

say() { echo "postgres: $*" >&2; }

# Debian installs the server's programs under /usr/lib/postgresql/<major>/bin, off PATH.
pg_bin() {
    local dir
    for dir in /usr/lib/postgresql/*/bin; do
        [ -x "$dir/initdb" ] && { echo "$dir"; return 0; }
    done
    command -v initdb >/dev/null 2>&1 && { dirname "$(command -v initdb)"; return 0; }
    return 1
}

ensure_installed() {
    pg_bin >/dev/null && return 0
    say "installing postgresql"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends postgresql >/dev/null
}

# PostgreSQL refuses to run as root: as root, the cluster belongs to the `postgres` user.
as_owner() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

answers() {
    [ -f "$PORT_FILE" ] || return 1
    "$(pg_bin)/pg_isready" -q -h "$SOCK_DIR" -p "$(cat "$PORT_FILE")" 2>/dev/null
}

start() {
    ensure_installed
    local bin
    bin="$(pg_bin)"
    if answers; then
        say "already running on port $(cat "$PORT_FILE")"
        return 0
    fi
    mkdir -p "$PG_DIR" "$SOCK_DIR"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$PG_DIR" "$SOCK_DIR"
    if [ ! -f "$DATA/PG_VERSION" ]; then
        as_owner "$bin/initdb" -D "$DATA" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    fi
    local port
    port="$(free_port)"
    echo "$port" > "$PORT_FILE"
    say "starting on 127.0.0.1:$port and $SOCK_DIR (log: $LOG)"
    touch "$LOG"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$LOG" "$PORT_FILE"
    as_owner "$bin/pg_ctl" -D "$DATA" -l "$LOG" -w -t "$WAIT_S" \
        -o "-p $port -k $SOCK_DIR -c listen_addresses=127.0.0.1 -c fsync=on" start >/dev/null
    as_owner "$bin/psql" -q -h "$SOCK_DIR" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 \
        -c "SELECT 1 FROM pg_database WHERE datname = '$DB'" -t | grep -q 1 ||
        as_owner "$bin/createdb" -h "$SOCK_DIR" -p "$port" -U postgres "$DB"
    say "ready"
}

stop() {
    if [ ! -f "$DATA/postmaster.pid" ]; then
        say "not running"
        return 0
    fi
    local pid
    pid="$(head -n1 "$DATA/postmaster.pid")"
    as_owner "$(pg_bin)/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
    say "stopped (pid $pid)"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
env)
    [ -f "$PORT_FILE" ] || { say "not started"; exit 1; }
    echo "export PARITYBOT_TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:$(cat "$PORT_FILE")/$DB"
    ;;
status)
    if answers; then
        echo "running on port $(cat "$PORT_FILE")"
    else
        echo "not running"
        exit 1
    fi
    ;;
*)
    echo "usage: $0 start|stop|env|status" >&2
    exit 2
    ;;
esac
