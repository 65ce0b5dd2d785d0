#!/usr/bin/env bash
# Build the paritybot image, start it, and check it the way a deployment uses it.
#
#   scripts/check-deploy.sh                    # base image python:3.12-slim, from a registry
#   BASE_IMAGE=my/python:3.12 scripts/check-deploy.sh
#   scripts/check-deploy.sh --local-base       # no registry: the base from scripts/build-base-image.sh
#   scripts/check-deploy.sh --private-engine   # use scripts/docker-engine.sh's engine, starting it
#                                              # if needed (and stopping it at the end if this did)
#   scripts/check-deploy.sh --upgrade-from 0.1.0   # then deploy/README.md step 8 from that release
#
# The commands are those deploy/README.md shows. Checks, in order: the image builds, with exactly
# the packages of deploy/requirements.txt (uv.lock's, so two builds of one release are alike); it runs as a
# non-root user and has git; `serve` without a webhook secret exits 2 with one line; `db upgrade`
# migrates a fresh data volume; with the webhook secret and a throwaway App key as mounted files it
# answers /healthz, turns healthy, accepts a signed ping, refuses a badly signed one, keeps a
# delivery in the store, runs every process as non-root, logs JSON lines on stderr (none on
# stdout), shows no secret in `docker inspect`, and stops cleanly on SIGTERM. Many hosts (when the
# build has `paritybot db` and PostgreSQL can be installed): on a private cluster that checks
# passwords, the owner's `db upgrade`, deploy/postgres/init-roles.sh, serve on PostgreSQL without an
# engine socket answering a signed ping, an agent refusing the App's key, an agent registering as
# paritybot_agent and shown by `paritybot status`, and its clean exit on SIGTERM. Then, when a compose
# tool is installed: the compose file renders, refuses to render without the secret file, and `up`
# with the built image gives a healthy service that reaches the engine through the socket as a
# non-root user with no secret in `docker inspect`; the upgrade step (`up -d` recreating the
# container) keeps the database; `down -v` removes it. With --upgrade-from RELEASE (a release of
# CHANGELOG.md): that release's own deployment (its commit cloned as an operator's checkout, its
# image, its guide's .env, its compose file), a delivery and a run in flight, then every block of
# deploy/README.md marked `<!-- step8: NAME -->` run as written: the upgrade to HEAD and the way
# back; for a release with `paritybot agent`, the same for serve and an agent on PostgreSQL.
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
LOCAL_BASE=0
UPGRADE_FROM=""
while [ $# -gt 0 ]; do
    case "$1" in
    --private-engine) PRIVATE_ENGINE=1 ;;
    --local-base) LOCAL_BASE=1 ;;
    --upgrade-from) UPGRADE_FROM="${2:?--upgrade-from needs a release, e.g. 0.2.0}"; shift ;;
    *) echo "usage: $0 [--local-base] [--private-engine] [--upgrade-from RELEASE]" >&2; exit 2 ;;
    esac
    shift
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/paritybot-check.XXXXXX")"
SUMMARY=()
STARTED_ENGINE=0
COMPOSE=()
PG_DIR=""

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
    docker rm -f "$NAME" "$NAME-serve" "$NAME-agent" "$NAME-up-serve" "$NAME-up-agent" >/dev/null 2>&1 || true
    docker image rm "$IMAGE-new" >/dev/null 2>&1 || true
    if [ -n "$PG_DIR" ]; then
        PARITYBOT_PG_DIR="$PG_DIR" "$ROOT/scripts/postgres.sh" stop >/dev/null 2>&1 || true
        rm -rf "$PG_DIR"
    fi
    if [ "${#COMPOSE[@]}" -gt 0 ]; then
        "${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
    fi
    if [ -n "${SITE:-}" ] && [ -d "$SITE/deploy" ]; then
        (cd "$SITE/deploy" && "${COMPOSE_TOOL[@]}" down -v --remove-orphans >/dev/null 2>&1) || true
        docker image rm "paritybot:$UPGRADE_FROM" "paritybot:${NEW_VERSION:-none}" "paritybot-check-old:$$" >/dev/null 2>&1 || true
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
if [ "$LOCAL_BASE" -eq 1 ]; then
    BASE_IMAGE="paritybot/base:bookworm"
    t0=$(now_ms)
    "$ROOT/scripts/build-base-image.sh" "$BASE_IMAGE" >"$WORK/base.log" 2>&1 ||
        fail "scripts/build-base-image.sh" "$(cat "$WORK/base.log")"
    record PASS "base image $BASE_IMAGE without a registry ($(seconds_since "$t0"))"
fi
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

# The packages are uv.lock's, exactly: what pip freeze says in the image is deploy/requirements.txt
# (for this platform: lines whose markers exclude it, e.g. Windows-only packages, are not there).
frozen="$(docker run --rm --entrypoint /opt/paritybot/bin/python "$IMAGE" -m pip freeze --exclude paritybot |
    tr '[:upper:]_' '[:lower:]-' | sort)"
locked="$(docker run --rm -i --entrypoint /opt/paritybot/bin/python "$IMAGE" -c '
import sys
from pip._vendor.packaging.requirements import Requirement
for line in sys.stdin:
    if "==" in line and not line.startswith((" ", "#")):
        req = Requirement(line.split(" \\")[0].strip())
        if req.marker is None or req.marker.evaluate():
            print(str(req).split(";")[0].strip())
' <"$ROOT/deploy/requirements.txt" | tr '[:upper:]_' '[:lower:]-' | sort)"
[ "$frozen" = "$locked" ] ||
    fail "the image's packages are not deploy/requirements.txt's" "$(diff <(echo "$locked") <(echo "$frozen"))"
record PASS "pip freeze in the image = deploy/requirements.txt ($(echo "$frozen" | wc -l) packages, uv.lock's)"

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

# --- the migration -------------------------------------------------------------------------------
# deploy/README.md's upgrade step runs it by hand; serve runs it at start-up too.
HAS_DB=0
docker run --rm "$IMAGE" db --help >/dev/null 2>&1 && HAS_DB=1
if [ "$HAS_DB" -eq 1 ]; then
    DATA_VOLUME="paritybot-check-data-$$"
    set +e
    migrated="$(docker run --rm -v "$DATA_VOLUME:/var/lib/paritybot" "$IMAGE" db upgrade 2>&1)"
    rc=$?
    again="$(docker run --rm -v "$DATA_VOLUME:/var/lib/paritybot" "$IMAGE" db upgrade 2>&1)"
    rc2=$?
    set -e
    docker volume rm "$DATA_VOLUME" >/dev/null 2>&1 || true
    [ "$rc" -eq 0 ] || fail "db upgrade on a fresh volume: exit $rc" "$migrated"
    [ "$rc2" -eq 0 ] || fail "db upgrade run twice: exit $rc2" "$again"
    record PASS "db upgrade: a fresh volume migrated, a second run a no-op ($(printf '%s' "$again" | tail -n1))"
else
    record SKIP "db upgrade: this build has no \`paritybot db\` command"
fi

# --- serve with a secret -------------------------------------------------------------------------
# A throwaway App key: nothing is ever signed for GitHub with it. It and the webhook secret are
# files, mounted as deploy/README.md does; world-readable so the container's user can read them.
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$WORK/app-key.pem" 2>/dev/null
printf '%s\n' "$SECRET" >"$WORK/webhook-secret"
chmod 0644 "$WORK/app-key.pem" "$WORK/webhook-secret"

t0=$(now_ms)
docker run -d --name "$NAME" --init \
    -p 127.0.0.1::8080 \
    --read-only --tmpfs /tmp --cap-drop ALL --security-opt no-new-privileges \
    --health-interval 2s \
    -v "$WORK/app-key.pem:/run/secrets/paritybot_private_key:ro" \
    -v "$WORK/webhook-secret:/run/secrets/paritybot_webhook_secret:ro" \
    -e PARITYBOT_APP_ID=12345 \
    -e PARITYBOT_WEBHOOK_SECRET_FILE=/run/secrets/paritybot_webhook_secret \
    -e PARITYBOT_PRIVATE_KEY_PATH=/run/secrets/paritybot_private_key \
    -e PARITYBOT_GITHUB_API_URL=http://127.0.0.1:9 \
    "$IMAGE" >/dev/null
port="$(docker port "$NAME" 8080/tcp | grep -m1 '^127\.0\.0\.1:' | cut -d: -f2)"
[ -n "$port" ] || fail "no published port"
base="http://127.0.0.1:$port"

wait_healthz() { # URL CONTAINER
    local deadline=$(($(date +%s) + WAIT_S)) body
    while [ "$(date +%s)" -lt "$deadline" ]; do
        if body="$(curl -fsS --max-time 2 "$1/healthz" 2>/dev/null)"; then
            [[ "${body// /}" == '{"status":"ok"'* ]] || fail "/healthz answered $body"
            HEALTHZ="$body"
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
record PASS "/healthz 200 $HEALTHZ on 127.0.0.1:$port ($(seconds_since "$t0") after start)"
wait_healthy "$NAME"
record PASS "HEALTHCHECK healthy ($(seconds_since "$t0") after start, interval 2s)"

no_secret_in_inspect() { # CONTAINER
    local key_line
    key_line="$(sed -n 2p "$WORK/app-key.pem")"
    if docker inspect "$1" | grep -qF -e "$SECRET" -e "$key_line"; then
        fail "docker inspect $1 shows a secret"
    fi
}

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
send_delivery() { # BASE_URL CONTAINER -> prints the delivery id
    local event='{"action":"created","installation":{"id":1},"sender":{"login":"octocat"}}' sig id status
    sig="sha256=$(printf '%s' "$event" | openssl dgst -sha256 -hmac "$SECRET" | awk '{print $NF}')"
    id="check-$(openssl rand -hex 8)"
    status="$(curl -sS --max-time 5 -o /dev/null -w '%{http_code}' -X POST "$1/webhook" \
        -H 'Content-Type: application/json' -H 'X-GitHub-Event: installation' \
        -H "X-GitHub-Delivery: $id" -H "X-Hub-Signature-256: $sig" --data-binary "$event")"
    [ "$status" = 202 ] || fail "signed delivery answered $status" "$(docker logs "$2" 2>&1)"
    echo "$id"
}
stored() { # CONTAINER DELIVERY_ID -> prints how many rows the store holds for it
    docker exec "$1" python3 -c 'import sqlite3, sys
db = sqlite3.connect("/var/lib/paritybot/paritybot.db")
print(db.execute("SELECT count(*) FROM deliveries WHERE delivery_id = ?", (sys.argv[1],)).fetchone()[0])' "$2"
}
delivery="$(send_delivery "$base" "$NAME")"
[ "$(stored "$NAME" "$delivery")" = 1 ] || fail "the store does not hold the delivery after its 202"
record PASS "signed delivery: 202, committed in the store"

uids="$(docker exec "$NAME" sh -c 'cat /proc/[0-9]*/status 2>/dev/null' | awk '/^Uid:/ {print $2}' | sort -u | tr '\n' ' ')"
if [ -z "$uids" ] || [[ " $uids" == *" 0 "* ]]; then
    fail "processes run as uid(s) $uids"
fi
record PASS "every process in the container runs as uid ${uids% }"

# The logs: JSON lines on stderr, nothing on stdout (deploy/README.md says where to find them).
docker logs "$NAME" 2>&1 >/dev/null | grep -q '"serving"' || fail "no 'serving' log line on stderr" "$(docker logs "$NAME" 2>&1)"
stdout_lines="$(docker logs "$NAME" 2>/dev/null | grep -c . || true)"
[ "$stdout_lines" = 0 ] || fail "$stdout_lines line(s) on stdout" "$(docker logs "$NAME" 2>/dev/null)"
record PASS "logs: JSON lines on stderr, none on stdout"
no_secret_in_inspect "$NAME"
record PASS "docker inspect shows neither the webhook secret nor the key"
t0=$(now_ms)
docker stop -t 20 "$NAME" >/dev/null
code="$(docker inspect --format '{{.State.ExitCode}}' "$NAME")"
[ "$code" = 0 ] || fail "exit code $code after SIGTERM" "$(docker logs "$NAME" 2>&1)"
record PASS "SIGTERM: clean exit 0 in $(seconds_since "$t0")"
docker rm "$NAME" >/dev/null

# --- many hosts: PostgreSQL, db upgrade, serve and an agent -----------------------------------------
# The roles of docker-compose.control.yml and docker-compose.agent.yml, started with `docker run`
# on a private PostgreSQL (scripts/postgres.sh) that checks passwords as a deployment's does: the
# owner migrates, postgres/init-roles.sh gives the agents their login, serve and an agent connect
# with password files, and `paritybot status` shows the agent. Host networking: the cluster
# listens on this machine's loopback.
start_serve() { # NAME IMAGE -> prints its port; serve on the private PostgreSQL as its owner
    local port
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    docker run -d --name "$1" --init "${OWNER_ARGS[@]}" \
        --read-only --tmpfs /tmp --tmpfs /var/lib/paritybot:uid=10001,gid=10001 --cap-drop ALL \
        --security-opt no-new-privileges \
        -v "$WORK/app-key.pem:/run/secrets/paritybot_private_key:ro" \
        -v "$WORK/webhook-secret:/run/secrets/paritybot_webhook_secret:ro" \
        -e PARITYBOT_APP_ID=12345 -e PARITYBOT_PORT="$port" -e PARITYBOT_HOST=127.0.0.1 \
        -e PARITYBOT_WEBHOOK_SECRET_FILE=/run/secrets/paritybot_webhook_secret \
        -e PARITYBOT_PRIVATE_KEY_PATH=/run/secrets/paritybot_private_key \
        -e PARITYBOT_GITHUB_API_URL=http://127.0.0.1:9 "$2" serve >/dev/null
    echo "$port"
}

wait_agent_listed() { # SERVE AGENT -> AGENT_STATUS: `paritybot status` once it lists check-agent
    local deadline=$(($(date +%s) + WAIT_S)) status=""
    while [ "$(date +%s)" -lt "$deadline" ]; do
        status="$(docker exec "$1" paritybot status 2>&1 || true)"
        [[ "$status" == *check-agent* ]] && break
        [ "$(docker inspect --format '{{.State.Running}}' "$2")" = true ] ||
            fail "many hosts: the agent $2 exited" "$(docker logs "$2" 2>&1)"
        sleep 1
    done
    [[ "$status" == *check-agent* ]] || fail "many hosts: paritybot status never showed the agent" "$status"
    AGENT_STATUS="$status"
}

many_hosts() {
    local pg_dir port sock owner_url agent_url serve_port gid status
    pg_dir="$(mktemp -d /tmp/paritybot-check-pg.XXXXXX)"
    PG_DIR="$pg_dir"
    PARITYBOT_PG_DIR="$pg_dir" "$ROOT/scripts/postgres.sh" start >"$WORK/pg.log" 2>&1 ||
        { record SKIP "many hosts: no PostgreSQL ($(tail -n1 "$WORK/pg.log"))"; return 0; }
    port="$(cat "$pg_dir/port")"
    sock="$pg_dir/sock"
    printf 'local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n' >"$pg_dir/data/pg_hba.conf"
    mkdir -p "$WORK/secrets"
    openssl rand -hex 16 >"$WORK/secrets/paritybot_db_owner_password"
    openssl rand -hex 16 >"$WORK/secrets/paritybot_db_agent_password"
    chmod 0644 "$WORK/secrets"/*
    # What the postgres image does on an empty volume: the owner and its database, then the script.
    PGHOST="$sock" PGPORT="$port" PGUSER=postgres psql -q -v ON_ERROR_STOP=1 -d postgres \
        -v password="$(cat "$WORK/secrets/paritybot_db_owner_password")" >"$WORK/pg.log" 2>&1 <<'SQL' ||
SELECT pg_reload_conf();
CREATE ROLE paritybot LOGIN PASSWORD :'password';
ALTER DATABASE paritybot OWNER TO paritybot;
SQL
        fail "many hosts: the database owner" "$(cat "$WORK/pg.log")"
    PGHOST="$sock" PGPORT="$port" POSTGRES_USER=postgres POSTGRES_DB=paritybot \
        PARITYBOT_SECRETS_DIR="$WORK/secrets" "$ROOT/deploy/postgres/init-roles.sh" >"$WORK/pg.log" 2>&1 ||
        fail "many hosts: deploy/postgres/init-roles.sh" "$(cat "$WORK/pg.log")"
    owner_url="postgresql://paritybot@127.0.0.1:$port/paritybot"
    agent_url="postgresql://paritybot_agent@127.0.0.1:$port/paritybot"
    OWNER_ARGS=(--network host -v "$WORK/secrets/paritybot_db_owner_password:/run/secrets/paritybot_db_owner_password:ro"
        -e "PARITYBOT_DATABASE_URL=$owner_url" -e PARITYBOT_DATABASE_PASSWORD_FILE=/run/secrets/paritybot_db_owner_password)
    local owner=("${OWNER_ARGS[@]}")

    local migrated
    migrated="$(docker run --rm "${owner[@]}" "$IMAGE" db upgrade 2>&1)" || fail "many hosts: db upgrade" "$migrated"
    record PASS "many hosts: db upgrade as the owner, password from a file: $(printf '%s' "$migrated" | tail -n1)"

    serve_port="$(start_serve "$NAME-serve" "$IMAGE")"
    wait_healthz "http://127.0.0.1:$serve_port" "$NAME-serve"
    base="http://127.0.0.1:$serve_port"
    answer="$(post_ping "$sig")"
    [[ "$answer" == "200 "*pong* ]] || fail "many hosts: signed ping answered: $answer" "$(docker logs "$NAME-serve" 2>&1)"
    record PASS "many hosts: serve on PostgreSQL as the owner, no engine socket: /healthz 200, signed ping 200"

    gid="$(stat -c %g "${DOCKER_SOCKET_PATH}")"
    AGENT_ARGS=(--network host --init --read-only --tmpfs /tmp --cap-drop ALL --security-opt no-new-privileges
        -v "$WORK/secrets/paritybot_db_agent_password:/run/secrets/paritybot_db_agent_password:ro"
        -v "${DOCKER_SOCKET_PATH}:/var/run/docker.sock" --group-add "$gid"
        -e "PARITYBOT_DATABASE_URL=$agent_url" -e PARITYBOT_DATABASE_PASSWORD_FILE=/run/secrets/paritybot_db_agent_password)
    local agent=("${AGENT_ARGS[@]}")
    set +e
    refusal="$(docker run --rm "${agent[@]}" -v "$WORK/app-key.pem:/k.pem:ro" -e PARITYBOT_PRIVATE_KEY_PATH=/k.pem \
        "$IMAGE" agent --labels check --name check-agent 2>&1)"
    rc=$?
    set -e
    [ "$rc" -eq 2 ] && [ "$(printf '%s\n' "$refusal" | grep -c .)" -eq 1 ] ||
        fail "many hosts: an agent given the App's key: exit $rc" "$refusal"
    record PASS "many hosts: an agent given the App's key: exit 2, one line: $refusal"
    docker run -d --name "$NAME-agent" "${agent[@]}" "$IMAGE" agent --labels check --name check-agent >/dev/null
    wait_agent_listed "$NAME-serve" "$NAME-agent"
    status="$AGENT_STATUS"
    record PASS "many hosts: agent as paritybot_agent, registered; paritybot status: $(printf '%s' "$status" | grep -m1 check-agent | tr -s ' ')"
    docker stop -t 20 "$NAME-agent" >/dev/null
    code="$(docker inspect --format '{{.State.ExitCode}}' "$NAME-agent")"
    [ "$code" = 0 ] || fail "many hosts: agent exit code $code after SIGTERM" "$(docker logs "$NAME-agent" 2>&1)"
    record PASS "many hosts: SIGTERM: the agent exits 0"
}

if [ "$HAS_DB" -eq 1 ]; then
    DOCKER_SOCKET_PATH="/var/run/docker.sock"
    case "${DOCKER_HOST:-}" in unix://*) DOCKER_SOCKET_PATH="${DOCKER_HOST#unix://}" ;; esac
    if [ -S "$DOCKER_SOCKET_PATH" ]; then
        many_hosts
    else
        record SKIP "many hosts: the engine is remote; the agent mounts a local socket"
    fi
else
    record SKIP "many hosts: this build has no \`paritybot db\` command"
fi

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
# The settings of deploy/README.md, step 4, with the files of the run above.
export PARITYBOT_IMAGE="$IMAGE" BASE_IMAGE PARITYBOT_APP_ID=12345 PARITYBOT_WEBHOOK_SECRET_FILE="$WORK/webhook-secret"
export PARITYBOT_PRIVATE_KEY_FILE="$WORK/app-key.pem" PARITYBOT_GITHUB_API_URL=http://127.0.0.1:9
export PARITYBOT_PUBLISH_PORT="" PARITYBOT_HEALTH_INTERVAL=2s
DOCKER_SOCKET="${socket:-/var/run/docker.sock}"
DOCKER_GID="$(stat -c %g "$DOCKER_SOCKET" 2>/dev/null || echo 0)"
export DOCKER_SOCKET DOCKER_GID

"${compose_base[@]}" config >"$WORK/compose.out" 2>&1 || fail "compose config" "$(cat "$WORK/compose.out")"
record PASS "compose config renders (${COMPOSE_TOOL[*]} $compose_version)"
set +e
refusal="$(env -u PARITYBOT_WEBHOOK_SECRET_FILE "${compose_base[@]}" config 2>&1 >/dev/null)"
rc=$?
set -e
if [ "$rc" -eq 0 ] || [[ "$refusal" != *PARITYBOT_WEBHOOK_SECRET_FILE* ]]; then
    fail "compose config without the secret file: exit $rc" "$refusal"
fi
record PASS "compose config without the secret file is refused: $(printf '%s' "$refusal" | grep -o -m1 "set PARITYBOT_WEBHOOK_SECRET_FILE[^\"'}]*" | head -n1)"

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
no_secret_in_inspect "$cid"
record PASS "compose: docker inspect shows neither the webhook secret nor the key"

# The upgrade of deploy/README.md, step 8, as written there: stop, back the database up, start a
# new tag on the same volume.
delivery="$(send_delivery "http://127.0.0.1:$cport" "$cid")"
NEW_IMAGE="$IMAGE-new"
docker tag "$IMAGE" "$NEW_IMAGE"
t0=$(now_ms)
"${COMPOSE[@]}" stop >"$WORK/stop.log" 2>&1 || fail "compose stop" "$(cat "$WORK/stop.log")"
mkdir "$WORK/backup"
(cd "$WORK/backup" && docker run --rm -u 0 --entrypoint sh -v "${PROJECT}_paritybot-data:/data:ro" -v "$PWD":/backup \
    "$NEW_IMAGE" -c 'cd /data && tar -czf /backup/paritybot-db-$(date +%F).tgz paritybot.db*') ||
    fail "the backup command of step 8"
backed_up="$(tar -tzf "$WORK/backup/paritybot-db-$(date +%F).tgz" | tr '\n' ' ')"
[[ " $backed_up" == *" paritybot.db "* ]] || fail "the backup holds '$backed_up', not paritybot.db"
PARITYBOT_IMAGE="$NEW_IMAGE" "${COMPOSE[@]}" up -d --no-build >"$WORK/up.log" 2>&1 ||
    fail "compose up with the new tag" "$(cat "$WORK/up.log")"
export PARITYBOT_IMAGE="$NEW_IMAGE"
new_cid="$("${COMPOSE[@]}" ps -q paritybot)"
[ "$new_cid" != "$cid" ] || fail "up -d with a new tag kept the old container"
[ "$(docker inspect --format '{{.Config.Image}}' "$new_cid")" = "$NEW_IMAGE" ] || fail "not running $NEW_IMAGE"
cport="$("${COMPOSE[@]}" port paritybot 8080 | cut -d: -f2)"
wait_healthz "http://127.0.0.1:$cport" "$new_cid"
wait_healthy "$new_cid"
[ "$(stored "$new_cid" "$delivery")" = 1 ] || fail "the upgraded container's store lost the delivery"
record PASS "upgrade (stop, backup: $backed_up, up -d $NEW_IMAGE): healthy again, the delivery kept ($(seconds_since "$t0"))"

t0=$(now_ms)
"${COMPOSE[@]}" down -v --remove-orphans >"$WORK/down.log" 2>&1 || fail "compose down" "$(cat "$WORK/down.log")"
COMPOSE=()
record PASS "compose down -v ($(seconds_since "$t0"))"

# --- upgrade from an earlier release, and back (deploy/README.md, step 8) ------------------------
# That release's own deployment: its commit (CHANGELOG.md) checked out as an operator's clone, its
# image built with the build arguments above, its guide's deploy/.env with this run's values, its
# compose file up. Then step 8's blocks of this guide, run as written (`docker compose` is
# docker-compose where only that is installed; `sudo` is nothing for root; /etc/paritybot is a
# directory of this run): the upgrade to this checkout's HEAD, then the way back.
[ -n "$UPGRADE_FROM" ] || exit 0
OLD_COMMIT="$(grep -E "^\[${UPGRADE_FROM//./\\.}\]: " "$ROOT/CHANGELOG.md" | grep -oE '[0-9a-f]{40}' | head -n1)" ||
    fail "--upgrade-from $UPGRADE_FROM: no such release in CHANGELOG.md"
NEW_VERSION="$(sed -n 's/^VERSION = "\([^"]*\)"$/\1/p' "$ROOT/bot/core/release.py")"
NEW_COMMIT="$(git -C "$ROOT" rev-parse HEAD)"
[ -z "$(git -C "$ROOT" status --porcelain --untracked-files=no)" ] ||
    say "the upgrade goes to HEAD ($NEW_COMMIT); uncommitted changes are not in it"
SITE="$WORK/site"
git clone -q "$ROOT" "$SITE" && git -C "$SITE" checkout -q "$OLD_COMMIT"
ETC="$WORK/etc"
mkdir -p "$ETC" && cp "$WORK/app-key.pem" "$ETC/private-key.pem" && cp "$WORK/webhook-secret" "$ETC/webhook-secret"

guide_block() { # FILE NAME -> the sh block marked <!-- step8: NAME --> (or, for the old .env, after its heading)
    awk -v mark="<!-- step8: $2 -->" '$0 == mark {on = 1; next} on && /^```sh$/ {inside = 1; next}
        inside && /^```$/ {exit} inside {print}' "$1"
}
run_guide() { # DIR TEXT [VAR=VALUE...] -> runs TEXT with bash -e in DIR, with only the guide's variables
    local dir="$1" text="$2"
    shift 2
    local prelude='docker() { if [ "$1" = compose ] && ! command docker compose version >/dev/null 2>&1; then shift; docker-compose "$@"; else command docker "$@"; fi; }
sudo() { "$@"; }
'
    (cd "$dir" && env -i PATH="$PATH" HOME="$HOME" DOCKER_HOST="${DOCKER_HOST:-}" "$@" \
        bash -e -c "$prelude${text//\/etc\/paritybot\//$ETC/}") >>"$WORK/upgrade.log" 2>&1 ||
        fail "step 8 as written: $(printf '%s' "$text" | head -n1)…" "$(cat "$WORK/upgrade.log")"
}
GUIDE_VARS=(OLD="$UPGRADE_FROM" NEW="$NEW_VERSION" NEW_COMMIT="$NEW_COMMIT" VOLUME="${PROJECT}-site_paritybot-data"
    BACKUP="$WORK/backups/before-$NEW_VERSION" BASE_IMAGE="$BASE_IMAGE" PIP_INDEX_URL="${PIP_INDEX_URL:-https://pypi.org/simple}"
    EXTRA_CA_CERTS="$( [ "${#cas[@]}" -gt 0 ] && cat "${cas[@]}")")
run_guide_block() { # NAME [DIR]
    run_guide "${2:-$SITE/deploy}" "$(guide_block "$ROOT/deploy/README.md" "$1")" "${GUIDE_VARS[@]}"
}

# The old release: its image, its guide's .env (step 4 there) with this run's values, compose up.
t0=$(now_ms)
docker build "${build_args[@]}" -t "paritybot-check-old:$$" "$SITE" >"$WORK/old-build.log" 2>&1 ||
    fail "docker build of $UPGRADE_FROM ($OLD_COMMIT)" "$(cat "$WORK/old-build.log")"
awk '/^Create `deploy\/.env`/ {on = 1} on && /^```sh$/ {inside = 1; next} inside && /^```$/ {exit} inside {print}' \
    "$SITE/deploy/README.md" >"$SITE/deploy/.env"
set_env() { # KEY VALUE: in the old .env, where its guide has the key (or adds it)
    sed -i "/^$1=/d" "$SITE/deploy/.env" && printf '%s=%s\n' "$1" "$2" >>"$SITE/deploy/.env"
}
grep -q '^PARITYBOT_WEBHOOK_SECRET=' "$SITE/deploy/.env" && set_env PARITYBOT_WEBHOOK_SECRET "$SECRET"
grep -q '^PARITYBOT_WEBHOOK_SECRET_FILE=' "$SITE/deploy/.env" && set_env PARITYBOT_WEBHOOK_SECRET_FILE "$ETC/webhook-secret"
set_env PARITYBOT_APP_ID 12345
set_env PARITYBOT_PRIVATE_KEY_FILE "$ETC/private-key.pem"
set_env DOCKER_GID "$DOCKER_GID"
set_env DOCKER_SOCKET "$DOCKER_SOCKET"
set_env COMPOSE_PROJECT_NAME "${PROJECT}-site"
set_env PARITYBOT_IMAGE "paritybot-check-old:$$"
set_env PARITYBOT_GITHUB_API_URL http://127.0.0.1:9
set_env PARITYBOT_PUBLISH_PORT ""
set_env PARITYBOT_HEALTH_INTERVAL 2s
set_env BASE_IMAGE "$BASE_IMAGE"
run_guide "$SITE/deploy" 'docker compose up -d'
site_port() { (cd "$SITE/deploy" && env -i PATH="$PATH" DOCKER_HOST="${DOCKER_HOST:-}" "${COMPOSE_TOOL[@]}" port paritybot 8080 | cut -d: -f2); }
site_cid() { (cd "$SITE/deploy" && env -i PATH="$PATH" DOCKER_HOST="${DOCKER_HOST:-}" "${COMPOSE_TOOL[@]}" ps -q paritybot); }
old_cid="$(site_cid)"
wait_healthz "http://127.0.0.1:$(site_port)" "$old_cid"
wait_healthy "$old_cid"
kept="$(send_delivery "http://127.0.0.1:$(site_port)" "$old_cid")"
# A run in flight when the upgrade stops the service: a job the old release's store holds as
# running, its request made by that release's own model (no GitHub here, so no runner is
# actually at work on it; what the upgrade must do with it is the same).
in_flight="$(docker exec "$old_cid" python3 -c '
import sqlite3, uuid
try:
    from bot.core.models import RunRequest
except ImportError:
    from bot.models import RunRequest
request = RunRequest(installation_id=1, repo="acme/widgets", clone_url="https://github.com/acme/widgets.git",
                     pr_number=7, head_sha="a" * 40)
db = sqlite3.connect("/var/lib/paritybot/paritybot.db", isolation_level=None)
job = uuid.uuid4().hex
db.execute(
    "INSERT INTO jobs (id, seq, queue, repo, pr_number, head_sha, environment, request, dedupe_key, state,"
    " attempts, created_at, started_at) SELECT ?, coalesce(max(seq), 0) + 1, ?, ?, ?, ?, ?, ?, ?, ?, 1,"
    " ?, ? FROM jobs",
    (job, "default", request.repo, request.pr_number, request.head_sha, "default", request.model_dump_json(),
     "check-deploy-in-flight", "running", "2026-12-01T00:00:00+00:00", "2026-12-01T00:00:00+00:00"))
print(job)' 2>&1)" || fail "a run in flight in $UPGRADE_FROM's store" "$in_flight"
record PASS "$UPGRADE_FROM (${OLD_COMMIT:0:7}) with its own guide's .env and compose file: healthy, a delivery in, a run in flight ($(seconds_since "$t0"))"

# Step 8 of this guide, as written.
t0=$(now_ms)
run_guide_block prepare "$SITE"
run_guide_block stop
run_guide_block backup-sqlite
if [ "$(printf '%s\n' "$UPGRADE_FROM" "0.2.0" | sort -V | head -n1)" != "0.2.0" ]; then
    # The upgrade notes of 0.2.0 (CHANGELOG.md): the webhook secret moves to a file.
    notes="$(awk '/^## \[0\.2\.0\]/ {on = 1} on && /^  ```sh$/ {inside = 1; next} inside && /^  ```$/ {exit} inside {print substr($0, 3)}' "$ROOT/CHANGELOG.md")"
    run_guide "$SITE/deploy" "$notes"
fi
run_guide_block start
new_cid="$(site_cid)"
wait_healthz "http://127.0.0.1:$(site_port)" "$new_cid"
wait_healthy "$new_cid"
[[ "$HEALTHZ" == *"\"$NEW_VERSION\""* ]] || fail "after the upgrade /healthz answered $HEALTHZ, not version $NEW_VERSION"
[ "$(stored "$new_cid" "$kept")" = 1 ] || fail "the upgraded service lost the delivery"
[[ "$(docker logs "$new_cid" 2>&1)" == *"\"version\": \"$NEW_VERSION\""* ]] || fail "no starting line with the version" "$(docker logs "$new_cid" 2>&1)"
recovered="$(docker logs "$new_cid" 2>&1 | grep -m1 '"interrupted runs recovered"' || true)"
[[ "$recovered" == *'"requeued": 1'* ]] || fail "the run in flight was not queued again" "$(docker logs "$new_cid" 2>&1)"
record PASS "upgrade $UPGRADE_FROM → $NEW_VERSION as step 8 writes it: /healthz $HEALTHZ, the delivery kept, the run in flight queued again ($(seconds_since "$t0"))"

t0=$(now_ms)
after="$(send_delivery "http://127.0.0.1:$(site_port)" "$new_cid")"
run_guide "$SITE/deploy" "$(guide_block "$ROOT/deploy/README.md" rollback-check)
echo \"RESTORE=\$RESTORE\" > \"\$BACKUP/restore\"" "${GUIDE_VARS[@]}"
restore="$(cat "$WORK/backups/before-$NEW_VERSION/restore")"
[ "$restore" = RESTORE=yes ] && run_guide_block restore-sqlite
run_guide_block rollback-start
back_cid="$(site_cid)"
[ "$(docker inspect --format '{{.Config.Image}}' "$back_cid")" = "paritybot:$UPGRADE_FROM" ] || fail "the rollback does not run paritybot:$UPGRADE_FROM"
wait_healthz "http://127.0.0.1:$(site_port)" "$back_cid"
wait_healthy "$back_cid"
[ "$(stored "$back_cid" "$kept")" = 1 ] || fail "after the rollback the delivery from before the upgrade is gone"
expect_after=1
[ "$restore" = RESTORE=yes ] && expect_after=0
[ "$(stored "$back_cid" "$after")" = "$expect_after" ] || fail "after the rollback: the delivery received by $NEW_VERSION is $(stored "$back_cid" "$after"), not $expect_after"
record PASS "rollback to $UPGRADE_FROM as step 8 writes it ($restore): healthy, its data back ($(seconds_since "$t0"))"

# --- many hosts: the same upgrade and way back on PostgreSQL ------------------------------------------
# On the private cluster of the many-hosts checks, with `docker run` for the roles (the compose
# file's `postgres` image needs a registry): the old release's migration, serve and agent; the
# guide's order (agents first, then serve), its pg_dump block for a PostgreSQL of one's own (`PG=`
# empty, libpq's variables set), the new release's migration, serve and agent; then its way back.
[ -n "$PG_DIR" ] && [ -n "${OWNER_ARGS+x}" ] || { record SKIP "many hosts upgrade: no PostgreSQL above"; exit 0; }
old_image="paritybot-check-old:$$"
docker run --rm "$old_image" agent --help >/dev/null 2>&1 ||
    { record SKIP "many hosts upgrade: $UPGRADE_FROM has no \`paritybot agent\`"; exit 0; }
pg_port="$(cat "$PG_DIR/port")"
libpq=(PGHOST="$PG_DIR/sock" PGPORT="$pg_port" PGUSER=postgres)
docker rm -f "$NAME-serve" >/dev/null 2>&1 || true
env "${libpq[@]}" dropdb --force paritybot && env "${libpq[@]}" createdb --owner=paritybot paritybot ||
    fail "many hosts upgrade: a new database paritybot"
own_pg() { # BLOCK -> the block as the guide has it for a PostgreSQL of one's own
    guide_block "$ROOT/deploy/README.md" "$1" | sed 's/^PG=.*$/PG=/'
}
t0=$(now_ms)
migrated="$(docker run --rm "${OWNER_ARGS[@]}" "$old_image" db upgrade 2>&1)" || fail "many hosts: $UPGRADE_FROM's db upgrade" "$migrated"
port="$(start_serve "$NAME-up-serve" "$old_image")"
wait_healthz "http://127.0.0.1:$port" "$NAME-up-serve"
docker run -d --name "$NAME-up-agent" "${AGENT_ARGS[@]}" "$old_image" agent --labels check --name check-agent >/dev/null
wait_agent_listed "$NAME-up-serve" "$NAME-up-agent"
record PASS "many hosts: $UPGRADE_FROM's migration, serve and agent on PostgreSQL ($(seconds_since "$t0"))"

t0=$(now_ms)
docker stop -t 20 "$NAME-up-agent" >/dev/null && docker stop -t 20 "$NAME-up-serve" >/dev/null
docker rm "$NAME-up-agent" "$NAME-up-serve" >/dev/null
run_guide "$WORK" "$(own_pg backup-postgres)" "${GUIDE_VARS[@]}" "${libpq[@]}"
migrated="$(docker run --rm "${OWNER_ARGS[@]}" "paritybot:$NEW_VERSION" db upgrade 2>&1)" ||
    fail "many hosts: $NEW_VERSION's db upgrade" "$migrated"
port="$(start_serve "$NAME-up-serve" "paritybot:$NEW_VERSION")"
wait_healthz "http://127.0.0.1:$port" "$NAME-up-serve"
[[ "$HEALTHZ" == *"\"$NEW_VERSION\""* ]] || fail "many hosts: after the upgrade /healthz answered $HEALTHZ"
docker run -d --name "$NAME-up-agent" "${AGENT_ARGS[@]}" "paritybot:$NEW_VERSION" agent --labels check --name check-agent >/dev/null
wait_agent_listed "$NAME-up-serve" "$NAME-up-agent"
[[ "$(docker logs "$NAME-up-agent" 2>&1)" == *"\"version\": \"$NEW_VERSION\""* ]] || fail "many hosts: the agent's log names no version"
record PASS "many hosts: upgrade $UPGRADE_FROM → $NEW_VERSION (agents stopped first, pg_dump as the guide writes it, db upgrade, serve, agent): $(printf '%s' "$migrated" | tail -n1) ($(seconds_since "$t0"))"

t0=$(now_ms)
docker stop -t 20 "$NAME-up-agent" >/dev/null && docker stop -t 20 "$NAME-up-serve" >/dev/null
docker rm "$NAME-up-agent" "$NAME-up-serve" >/dev/null
set +e
verdict="$(docker run --rm "${OWNER_ARGS[@]}" "paritybot:$NEW_VERSION" db status --release "$UPGRADE_FROM" 2>&1)"
rc=$?
set -e
case "$rc" in
0) restore=RESTORE=no ;;
1) restore=RESTORE=yes && run_guide "$WORK" "$(own_pg restore-postgres)" "${GUIDE_VARS[@]}" "${libpq[@]}" ;;
*) fail "many hosts: db status --release $UPGRADE_FROM: exit $rc" "$verdict" ;;
esac
port="$(start_serve "$NAME-up-serve" "$old_image")"
wait_healthz "http://127.0.0.1:$port" "$NAME-up-serve"
docker run -d --name "$NAME-up-agent" "${AGENT_ARGS[@]}" "$old_image" agent --labels check --name check-agent >/dev/null
wait_agent_listed "$NAME-up-serve" "$NAME-up-agent"
record PASS "many hosts: rollback to $UPGRADE_FROM ($restore: $(printf '%s' "$verdict" | tail -n1)): serve and agent again ($(seconds_since "$t0"))"
