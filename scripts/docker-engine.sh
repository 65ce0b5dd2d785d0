#!/usr/bin/env bash
# Start, stop or describe a private Docker engine for tests and CI.
#
#   scripts/docker-engine.sh start   # install docker.io if missing, start dockerd, wait until it answers
#   scripts/docker-engine.sh stop    # stop the daemon this script started (by its pid file)
#   scripts/docker-engine.sh env     # print `export DOCKER_HOST=...` for eval
#   scripts/docker-engine.sh status  # exit 0 when the engine answers
#
# Everything lives under $PARITYBOT_ENGINE_DIR (default /tmp/paritybot-engine): the socket, the image
# store, the exec root and the pid file. A private engine never touches a system daemon's images or
# containers, and two checkouts can each run their own by choosing different directories.
set -euo pipefail

ENGINE_DIR="${PARITYBOT_ENGINE_DIR:-/tmp/paritybot-engine}"
SOCK="$ENGINE_DIR/docker.sock"
PIDFILE="$ENGINE_DIR/docker.pid"
LOG="$ENGINE_DIR/dockerd.log"
# dockerd refuses an exec root path longer than the unix socket limit allows; keep it short and
# apart from the data root so a stale one is easy to clear.
EXEC_ROOT="$ENGINE_DIR/exec"
DATA_ROOT="$ENGINE_DIR/data"
WAIT_S="${PARITYBOT_ENGINE_WAIT_S:-60}"
# Machines without GPUs: with PARITYBOT_ENGINE_GPU_STANDIN=1 and no NVIDIA hook installed, dockerd
# finds a stand-in hook that does nothing on its PATH, so containers asking for GPUs by id start
# (with no GPU in them) and the GPU lease tests read back what each was given. scripts/test.sh starts
# a second engine so, beside the main one, whose containers asking for GPUs must fail as they do
# on a machine without NVIDIA's runtime.
STANDIN_DIR="$ENGINE_DIR/gpu-standin"

say() { echo "docker-engine: $*" >&2; }

ensure_installed() {
    if command -v dockerd >/dev/null 2>&1 && command -v docker >/dev/null 2>&1; then
        return 0
    fi
    say "installing docker.io"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends docker.io >/dev/null
}

answers() {
    docker -H "unix://$SOCK" version --format '{{.Server.Version}}' >/dev/null 2>&1
}

running_pid() {
    [ -f "$PIDFILE" ] || return 1
    local pid
    pid="$(cat "$PIDFILE")"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

start() {
    ensure_installed
    mkdir -p "$ENGINE_DIR" "$DATA_ROOT" "$EXEC_ROOT"
    if running_pid >/dev/null && answers; then
        say "already running at unix://$SOCK"
        return 0
    fi
    # A daemon killed hard leaves its pid file and socket; dockerd refuses to start over a pid file
    # whose process is gone only on some versions, so clear both.
    rm -f "$PIDFILE" "$SOCK"
    local path="$PATH"
    rm -rf "$STANDIN_DIR"
    if [ "${PARITYBOT_ENGINE_GPU_STANDIN:-0}" = 1 ] && ! command -v nvidia-container-runtime-hook >/dev/null 2>&1; then
        mkdir -p "$STANDIN_DIR"
        printf '#!/bin/sh\n# A stand-in: lets GPU containers start on a machine without GPUs.\nexit 0\n' \
            >"$STANDIN_DIR/nvidia-container-runtime-hook"
        chmod +x "$STANDIN_DIR/nvidia-container-runtime-hook"
        path="$STANDIN_DIR:$PATH"
        say "a stand-in nvidia-container-runtime-hook is on the engine's PATH (no GPU here)"
    fi
    say "starting dockerd at unix://$SOCK (log: $LOG)"
    # setsid: the daemon must outlive this script and not receive the caller's terminal signals.
    PATH="$path" setsid dockerd \
        --host "unix://$SOCK" \
        --data-root "$DATA_ROOT" \
        --exec-root "$EXEC_ROOT" \
        --pidfile "$PIDFILE" \
        >"$LOG" 2>&1 </dev/null &
    local launched=$!
    local waited=0
    until answers; do
        if ! kill -0 "$launched" 2>/dev/null; then
            say "dockerd exited during start; last log lines:"
            tail -n 20 "$LOG" >&2
            return 1
        fi
        if [ "$waited" -ge $((WAIT_S * 10)) ]; then
            say "dockerd did not answer within ${WAIT_S}s; last log lines:"
            tail -n 20 "$LOG" >&2
            return 1
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    say "ready after ~$((waited / 10)).$((waited % 10))s"
}

stop() {
    local pid
    if ! pid="$(running_pid)"; then
        say "not running"
        rm -f "$PIDFILE" "$SOCK"
        return 0
    fi
    kill -TERM "$pid"
    # dockerd stops its containers first (10 s each by default); give it that long before forcing.
    local waited=0
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$waited" -ge 300 ]; then
            say "dockerd (pid $pid) ignored SIGTERM for 30s; killing it"
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    rm -f "$PIDFILE" "$SOCK"
    say "stopped (pid $pid)"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
env) echo "export DOCKER_HOST=unix://$SOCK" ;;
status)
    if answers; then
        echo "running at unix://$SOCK"
    else
        echo "not running at unix://$SOCK"
        exit 1
    fi
    ;;
*)
    echo "usage: $0 start|stop|env|status" >&2
    exit 2
    ;;
esac
