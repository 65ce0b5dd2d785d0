#!/usr/bin/env bash
# Install what the test suite needs and run it, on a fresh Debian/Ubuntu machine (as root or with sudo).
#
#   bash scripts/test.sh [pytest args...]
#
# The container-runner tests need a real Docker engine: this script starts a private one
# (scripts/docker-engine.sh), builds the test image from nothing (scripts/build-test-image.sh, no
# registry needed), runs pytest, and stops the engine it started. The several-hosts tests need a
# real PostgreSQL: it starts a private cluster the same way (scripts/postgres.sh) unless one
# answers already, and stops the one it started. With CI set, tests that need the engine or
# PostgreSQL fail rather than skip when it is unreachable.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
need=()
# docker-compose: the deploy tests render the compose files with compose itself, as the guide does.
# chromium and its chromedriver: the browser tests drive a real headless browser (tests/browser_support.py).
# ssh and ssh-keygen: `paritybot repro --ssh` is tested with a generated key and the ssh client.
for tool in git:git dockerd:docker.io debootstrap:debootstrap docker-compose:docker-compose \
    chromium:chromium chromedriver:chromium-driver ssh:openssh-client ssh-keygen:openssh-client; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool#*:}")
done
# Debian's python3 comes without venv until python3-venv is installed.
python3 -c "import ensurepip, venv" >/dev/null 2>&1 || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Exactly the versions of uv.lock, hashes checked (--locked: a lock that no longer matches
# pyproject.toml is an error, not a new resolution). The interpreter is the machine's python3;
# uv never downloads one.
export UV_PYTHON_DOWNLOADS=never
UV="$(scripts/uv.sh)"
"$UV" sync --quiet --locked --extra test --python python3
"$UV" sync --quiet --locked --extra test --check

engine_started=0
if ! scripts/docker-engine.sh status >/dev/null 2>&1; then
    scripts/docker-engine.sh start
    engine_started=1
fi
postgres_started=0
# The GPU lease tests: a second private engine whose dockerd finds a stand-in NVIDIA hook, so
# containers asking for GPUs by id start on this machine without GPUs (scripts/docker-engine.sh).
GPU_ENGINE_DIR="${PARITYBOT_GPU_ENGINE_DIR:-/tmp/paritybot-gpu-engine}"
gpu_engine_started=0
stop_services() {
    [ "$postgres_started" -eq 0 ] || scripts/postgres.sh stop
    [ "$gpu_engine_started" -eq 0 ] || PARITYBOT_ENGINE_DIR="$GPU_ENGINE_DIR" scripts/docker-engine.sh stop
    [ "$engine_started" -eq 0 ] || scripts/docker-engine.sh stop
}
trap stop_services EXIT
eval "$(scripts/docker-engine.sh env)"
if ! scripts/postgres.sh status >/dev/null 2>&1; then
    # Started here, stopped at exit; a failed start is not fatal here: the tests that need it fail
    # under CI, naming what is missing.
    if scripts/postgres.sh start; then postgres_started=1; fi
fi
if scripts/postgres.sh status >/dev/null 2>&1; then
    eval "$(scripts/postgres.sh env)"
fi
scripts/build-test-image.sh
if ! PARITYBOT_ENGINE_DIR="$GPU_ENGINE_DIR" scripts/docker-engine.sh status >/dev/null 2>&1; then
    PARITYBOT_ENGINE_DIR="$GPU_ENGINE_DIR" PARITYBOT_ENGINE_GPU_STANDIN=1 scripts/docker-engine.sh start
    gpu_engine_started=1
fi
export PARITYBOT_TEST_GPU_ENGINE="unix://$GPU_ENGINE_DIR/docker.sock"
test_image="${PARITYBOT_TEST_IMAGE:-paritybot-test/python:bookworm}"
if [ "$(docker image inspect --format '{{.Id}}' "$test_image")" != \
    "$(DOCKER_HOST="$PARITYBOT_TEST_GPU_ENGINE" docker image inspect --format '{{.Id}}' "$test_image" 2>/dev/null)" ]; then
    docker save "$test_image" | DOCKER_HOST="$PARITYBOT_TEST_GPU_ENGINE" docker load >/dev/null
fi

# Lint, format, types and the layers' contract (pyproject's tool.importlinter) are part of the
# suite: a change that breaks them does not pass.
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports

# pytest exits 5 when it collected no test: that fails here like any other non-zero exit.
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"

# The unit tests again on every Python the project claims and at the lowest versions it declares
# (scripts/test-compat.sh). Skipped when pytest was given arguments: a developer running one file
# wants that file.
if [ $# -eq 0 ]; then
    scripts/test-compat.sh
fi
