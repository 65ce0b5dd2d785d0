#!/usr/bin/env bash
# Build the paritybot image, start it, and check it the way a deployment uses it.
#
#   scripts/check-deploy.sh                    # base image python:3.12-slim, from a registry
#   BASE_IMAGE=my/python:3.12 scripts/check-deploy.sh
#   scripts/check-deploy.sh --private-engine   # use scripts/docker-engine.sh's engine, starting it
#                                              # if needed (and stopping it at the end if this did)
#
# Checks, in order: the image builds; it runs as a non-root user and has git; `serve` without a
# webhook secret exits 2 with one line; with a secret and a throwaway App key it answers /healthz,
# turns healthy, accepts a signed ping, refuses a badly signed one, runs every process as non-root,
# and stops cleanly on SIGTERM. Then, when a compose tool is installed: the compose file renders,
# refuses to render without the secret, and `up` with the built image gives a healthy service that
# reaches the engine through the socket as a non-root user; `down -v` removes it.
#
# Environment: BASE_IMAGE (python:3.12-slim), IMAGE (paritybot:check), PIP_INDEX_URL (a PyPI mirror),
# EXTRA_CA_CERTS_DIR (default /usr/local/share/ca-certificates: locally added CAs, passed to pip in
# the build so a TLS-inspecting egress proxy works). Needs: docker, curl, openssl.
# Nothing contacts GitHub: the App's API URL points at a closed local port.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE_IMAGE="${BASE_IMAGE:-python:3.12-slim}"
IMAGE="${IMAGE:-paritybot:check}"
EXTRA_CA_CERTS_DIR="${EXTRA_CA_CERTS_DIR:-/usr/local/share/ca-certificates}"
NAME="paritybot-check-$$"
PROJECT="paritybot-check-$$"
SECRET="check-$(openssl rand -hex 16)"
WAIT_S=90
PRIVATE_ENGINE=0
[ "${1:-}" = "--private-engine" ] && PRIVATE_ENGINE=1

WORK="$(mktemp -d "${TMPDIR:-/tmp}/paritybot-check.XXXXXX")"
SUMMARY=()
STARTED_ENGINE=0
COMPOSE=()

say() { echo "check-deploy: $*" >&2; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
seconds_since() { local ms=$(($(now_ms) - $1)); printf '%d.%01ds' $((ms / 1000)) $((ms % 1000 / 100)); }
record() { SUMMARY+=("$(printf '  %-4s  %s' "$1" "$2")"); }

fail() {
    record FAIL "$1"
    say "FAILED: $1"
    [ -n "${2:-}" ] && printf '%s\n' "$2" | tail -n 30 >&2
    exit 1
}

print_summary() {
    echo "check-deploy: summary (base $BASE_IMAGE, image $IMAGE, engine ${ENGINE_VERSION:-?})"
    printf '%s\n' "${SUMMARY[@]}"
}

cleanup() {
    local rc=$?
    docker rm -f "$NAME" >/dev/null 2>&1 || true
    if [ "${#COMPOSE[@]}" -gt 0 ]; then
        "${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
    fi
    rm -rf "$WORK"
    if [ "$STARTED_ENGINE" -eq 1 ]; then
        "$ROOT/scripts/docker-engine.sh" stop || true
    fi
    print_summary
    exit "$rc"
}
trap cleanup EXIT

for tool in docker curl openssl; do
    command -v "$tool" >/dev/null 2>&1 || { say "$tool is required"; exit 2; }
done

# --- the engine ----------------------------------------------------------------------------------
if [ "$PRIVATE_ENGINE" -eq 1 ]; then
    if ! "$ROOT/scripts/docker-engine.sh" status >/dev/null 2>&1; then
        "$ROOT/scripts/docker-engine.sh" start
        STARTED_ENGINE=1
    fi
    eval "$("$ROOT/scripts/docker-engine.sh" env)"
    export DOCKER_HOST
fi
ENGINE_VERSION="$(docker version --format '{{.Server.Version}}' 2>/dev/null)" ||
    fail "no Docker engine answers at ${DOCKER_HOST:-the default socket}"

# --- the image -----------------------------------------------------------------------------------
build_args=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
[ -n "${PIP_INDEX_URL:-}" ] && build_args+=(--build-arg "PIP_INDEX_URL=$PIP_INDEX_URL")
shopt -s nullglob
cas=("$EXTRA_CA_CERTS_DIR"/*.crt)
shopt -u nullglob
if [ "${#cas[@]}" -gt 0 ]; then
    build_args+=(--build-arg "EXTRA_CA_CERTS=$(cat "${cas[@]}")")
    say "passing ${#cas[@]} locally added CA certificate(s) to pip in the build"
fi
say "building $IMAGE from $BASE_IMAGE (log: docker build output on failure)"
t0=$(now_ms)
docker build "${build_args[@]}" -t "$IMAGE" "$ROOT" >"$WORK/build.log" 2>&1 ||
    fail "docker build" "$(cat "$WORK/build.log")"
size_mb=$(($(docker image inspect --format '{{.Size}}' "$IMAGE") / 1000000))
record PASS "image builds ($(seconds_since "$t0"), ${size_mb} MB)"

user="$(docker image inspect --format '{{.Config.User}}' "$IMAGE")"
uid="$(docker run --rm --entrypoint id "$IMAGE" -u)"
if [ -z "$user" ] || [ "$user" = root ] || [ "$uid" = 0 ]; then
    fail "image user is '$user' (uid $uid), not a non-root user"
fi
record PASS "image user $user (uid $uid)"

# git fetches PRs over HTTPS, so it needs the system CA bundle as well.
git_version="$(docker run --rm --entrypoint sh "$IMAGE" -c \
    'git --version && test -s /etc/ssl/certs/ca-certificates.crt')" || fail "git or CA certificates missing in the image"
record PASS "$git_version and a CA bundle in the image"

# --- serve without a secret ----------------------------------------------------------------------
set +e
refusal="$(docker run --rm "$IMAGE" serve 2>&1)"
rc=$?
set -e
lines="$(printf '%s\n' "$refusal" | grep -c .)"
if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || [[ "$refusal" != *PARITYBOT_WEBHOOK_SECRET* ]]; then
    fail "serve without a secret: exit $rc, $lines line(s)" "$refusal"
fi
record PASS "no secret: exit 2, one line: $refusal"

# --- serve with a secret -------------------------------------------------------------------------
# A throwaway App key: nothing is ever signed for GitHub with it. World-readable so the container's
# user can read the bind-mounted copy in the compose check below.
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$WORK/app-key.pem" 2>/dev/null
chmod 0644 "$WORK/app-key.pem"

t0=$(now_ms)
docker run -d --name "$NAME" --init \
    -p 127.0.0.1::8080 \
    --read-only --tmpfs /tmp --cap-drop ALL --security-opt no-new-privileges \
    --health-interval 2s \
    -e PARITYBOT_APP_ID=12345 \
    -e PARITYBOT_WEBHOOK_SECRET="$SECRET" \
    -e PARITYBOT_PRIVATE_KEY="$(cat "$WORK/app-key.pem")" \
    -e PARITYBOT_GITHUB_API_URL=http://127.0.0.1:9 \
    "$IMAGE" >/dev/null
port="$(docker port "$NAME" 8080/tcp | grep -m1 '^127\.0\.0\.1:' | cut -d: -f2)"
[ -n "$port" ] || fail "no published port"
base="http://127.0.0.1:$port"

wait_healthz() { # URL CONTAINER
    local deadline=$(($(date +%s) + WAIT_S)) body
    while [ "$(date +%s)" -lt "$deadline" ]; do
        if body="$(curl -fsS --max-time 2 "$1/healthz" 2>/dev/null)"; then
            [ "${body// /}" = '{"status":"ok"}' ] || fail "/healthz answered $body"
            return 0
        fi
        [ "$(docker inspect --format '{{.State.Running}}' "$2")" = true ] ||
            fail "container exited before /healthz answered" "$(docker logs "$2" 2>&1)"
        sleep 0.2
    done
    fail "/healthz did not answer within ${WAIT_S}s" "$(docker logs "$2" 2>&1)"
}

wait_healthy() { # CONTAINER
    local deadline=$(($(date +%s) + WAIT_S)) status=""
    while [ "$(date +%s)" -lt "$deadline" ]; do
        status="$(docker inspect --format '{{.State.Health.Status}}' "$1")"
        [ "$status" = healthy ] && return 0
        [ "$status" = unhealthy ] && break
        sleep 0.5
    done
    fail "container health is '$status'" "$(docker inspect --format '{{json .State.Health}}' "$1")"
}

wait_healthz "$base" "$NAME"
record PASS "/healthz 200 {\"status\": \"ok\"} on 127.0.0.1:$port ($(seconds_since "$t0") after start)"
wait_healthy "$NAME"
record PASS "HEALTHCHECK healthy ($(seconds_since "$t0") after start, interval 2s)"

post_ping() { # SIGNATURE -> prints "STATUS BODY"
    curl -sS --max-time 5 -o "$WORK/ping.out" -w '%{http_code}' -X POST "$base/webhook" \
        -H 'Content-Type: application/json' \
        -H 'X-GitHub-Event: ping' \
        -H "X-GitHub-Delivery: check-$(openssl rand -hex 8)" \
        -H "X-Hub-Signature-256: $1" \
        --data-binary "$PING"
    printf ' %s' "$(cat "$WORK/ping.out")"
}
PING='{"zen":"Design for failure.","hook_id":1,"hook":{"type":"App","events":["pull_request"]}}'
sig="sha256=$(printf '%s' "$PING" | openssl dgst -sha256 -hmac "$SECRET" | awk '{print $NF}')"
answer="$(post_ping "$sig")"
[[ "$answer" == "200 "*pong* ]] || fail "signed ping answered: $answer" "$(docker logs "$NAME" 2>&1)"
record PASS "signed ping: $answer"
answer="$(post_ping "sha256=$(printf '0%.0s' {1..64})")"
[[ "$answer" == "401 "* ]] || fail "badly signed ping answered: $answer"
record PASS "badly signed ping: ${answer%% *}"

# A delivery that is kept: it is committed in the store before the 202 (a second start would
# dispatch it; here no App is reachable, which is fine).
EVENT='{"action":"created","installation":{"id":1},"sender":{"login":"octocat"}}'
event_sig="sha256=$(printf '%s' "$EVENT" | openssl dgst -sha256 -hmac "$SECRET" | awk '{print $NF}')"
delivery="check-$(openssl rand -hex 8)"
status="$(curl -sS --max-time 5 -o /dev/null -w '%{http_code}' -X POST "$base/webhook" \
    -H 'Content-Type: application/json' -H 'X-GitHub-Event: installation' \
    -H "X-GitHub-Delivery: $delivery" -H "X-Hub-Signature-256: $event_sig" \
    --data-binary "$EVENT")"
[ "$status" = 202 ] || fail "signed delivery answered $status" "$(docker logs "$NAME" 2>&1)"
stored="$(docker exec "$NAME" python3 -c 'import sqlite3, sys
db = sqlite3.connect("/var/lib/paritybot/paritybot.db")
print(db.execute("SELECT count(*) FROM deliveries WHERE delivery_id = ?", (sys.argv[1],)).fetchone()[0])' "$delivery")"
[ "$stored" = 1 ] || fail "the store holds $stored rows of the delivery after its 202"
record PASS "signed delivery: 202, committed in the store"

uids="$(docker exec "$NAME" sh -c 'cat /proc/[0-9]*/status 2>/dev/null' | awk '/^Uid:/ {print $2}' | sort -u | tr '\n' ' ')"
if [ -z "$uids" ] || [[ " $uids" == *" 0 "* ]]; then
    fail "processes run as uid(s) $uids"
fi
record PASS "every process in the container runs as uid ${uids% }"

docker logs "$NAME" 2>&1 | grep -q '"serving"' || fail "no 'serving' log line" "$(docker logs "$NAME" 2>&1)"
t0=$(now_ms)
docker stop -t 20 "$NAME" >/dev/null
code="$(docker inspect --format '{{.State.ExitCode}}' "$NAME")"
[ "$code" = 0 ] || fail "exit code $code after SIGTERM" "$(docker logs "$NAME" 2>&1)"
record PASS "SIGTERM: clean exit 0 in $(seconds_since "$t0")"
docker rm "$NAME" >/dev/null

# --- docker compose ------------------------------------------------------------------------------
if docker compose version >/dev/null 2>&1; then
    COMPOSE_TOOL=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
    COMPOSE_TOOL=(docker-compose)
else
    record SKIP "compose: neither \`docker compose\` nor \`docker-compose\` is installed"
    exit 0
fi
compose_version="$("${COMPOSE_TOOL[@]}" version --short 2>/dev/null || echo '?')"
# An empty env file: a deploy/.env with real settings in this checkout must not be used here.
: >"$WORK/empty.env"
compose_base=("${COMPOSE_TOOL[@]}" --env-file "$WORK/empty.env" -f "$ROOT/deploy/docker-compose.yml" -p "$PROJECT")

socket="/var/run/docker.sock"
case "${DOCKER_HOST:-}" in
unix://*) socket="${DOCKER_HOST#unix://}" ;;
"") ;;
*) socket="" ;;
esac
export PARITYBOT_IMAGE="$IMAGE" BASE_IMAGE PARITYBOT_APP_ID=12345 PARITYBOT_WEBHOOK_SECRET="$SECRET"
export PARITYBOT_PRIVATE_KEY_FILE="$WORK/app-key.pem" PARITYBOT_GITHUB_API_URL=http://127.0.0.1:9
export PARITYBOT_PUBLISH_PORT="" PARITYBOT_HEALTH_INTERVAL=2s
DOCKER_SOCKET="${socket:-/var/run/docker.sock}"
DOCKER_GID="$(stat -c %g "$DOCKER_SOCKET" 2>/dev/null || echo 0)"
export DOCKER_SOCKET DOCKER_GID

"${compose_base[@]}" config >"$WORK/compose.out" 2>&1 || fail "compose config" "$(cat "$WORK/compose.out")"
record PASS "compose config renders (${COMPOSE_TOOL[*]} $compose_version)"
set +e
refusal="$(env -u PARITYBOT_WEBHOOK_SECRET "${compose_base[@]}" config 2>&1 >/dev/null)"
rc=$?
set -e
if [ "$rc" -eq 0 ] || [[ "$refusal" != *PARITYBOT_WEBHOOK_SECRET* ]]; then
    fail "compose config without the secret: exit $rc" "$refusal"
fi
record PASS "compose config without the secret is refused: $(printf '%s' "$refusal" | grep -o -m1 "set PARITYBOT_WEBHOOK_SECRET[^\"'}]*" | head -n1)"

if [ -z "$socket" ]; then
    record SKIP "compose up: the engine is remote ($DOCKER_HOST); the compose file mounts a local socket"
    exit 0
fi
COMPOSE=("${compose_base[@]}")
t0=$(now_ms)
"${COMPOSE[@]}" up -d --no-build >"$WORK/up.log" 2>&1 || fail "compose up" "$(cat "$WORK/up.log")"
cid="$("${COMPOSE[@]}" ps -q paritybot)"
cport="$("${COMPOSE[@]}" port paritybot 8080 | cut -d: -f2)"
wait_healthz "http://127.0.0.1:$cport" "$cid"
wait_healthy "$cid"
record PASS "compose up: healthy, /healthz 200 on 127.0.0.1:$cport ($(seconds_since "$t0"))"

engine_as="$("${COMPOSE[@]}" exec -T paritybot python3 -c \
    'import os, docker; print(os.getuid(), docker.from_env().version()["Version"])' 2>&1)" ||
    fail "the service cannot reach the engine through the socket" "$engine_as"
[[ "$engine_as" != "0 "* ]] || fail "the compose service runs as root"
record PASS "compose service (uid ${engine_as%% *}, socket group $DOCKER_GID) reaches engine ${engine_as#* }"

"${COMPOSE[@]}" exec -T paritybot test -s /var/lib/paritybot/paritybot.db ||
    fail "no database on the data volume"
# shellcheck disable=SC2016  # $2 and $4 are awk's fields
root_mount="$("${COMPOSE[@]}" exec -T paritybot awk '$2 == "/" {print $4}' /proc/mounts)"
[[ "$root_mount" == ro,* ]] || fail "the root file system is mounted '$root_mount', not read-only"
record PASS "database on the data volume; root file system read-only"

t0=$(now_ms)
"${COMPOSE[@]}" down -v --remove-orphans >"$WORK/down.log" 2>&1 || fail "compose down" "$(cat "$WORK/down.log")"
COMPOSE=()
record PASS "compose down -v ($(seconds_since "$t0"))"
