#!/usr/bin/env bash
# The unit tests (those that need no container engine, database or browser) on every Python the
# project claims, and at the lowest versions of its direct dependencies that pyproject.toml allows.
#
#   scripts/test-compat.sh              # all three, in this order
#   scripts/test-compat.sh lowest       # lowest-direct resolution, on this machine's python3
#   scripts/test-compat.sh debian12     # Debian 12's python3 (3.11.2: the oldest claimed), in a container
#   scripts/test-compat.sh debian13     # Debian 13's python3 (3.13: the newest claimed), in a container
#   scripts/test-compat.sh debian12 tests/test_probe.py   # after the name, pytest's arguments
#
# The containers run on the engine DOCKER_HOST names (scripts/test.sh starts a private one) from
# images built from nothing by scripts/build-base-image.sh (no registry needed). Each copies the
# checkout, installs uv.lock's versions with the pinned uv (hashes checked), and runs pytest; the
# package index is the only thing reached, and packages already in this machine's uv cache are not
# downloaded again. pytest's exit 5 (no test collected) fails like any other.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"

# What "unit" means here: every test but those that need a service this script does not start.
UNIT_TESTS=(-m "not docker and not postgres and not browser")
mode="${1:-all}"
[ $# -eq 0 ] || shift
PYTEST_ARGS=("${UNIT_TESTS[@]}" "$@")
export UV_PYTHON_DOWNLOADS=never
# Byte-compiled at install, as pip does by default: the contributors' environments the tests make
# link these site-packages and must find them as an installed environment is (uv compiles nothing
# unless told).
export UV_COMPILE_BYTECODE=1
UV="$(scripts/uv.sh)"
UV_CACHE="$("$UV" cache dir)"

say() { echo "test-compat: $*" >&2; }

# pytest's output is long; the summary line is what a reader needs from each run.
lowest() {
    # scripts/lowest-requirements.txt: the lowest-direct resolution, compiled and kept by
    # scripts/update-deps.sh (so this run installs the same packages on every machine).
    local venv="$ROOT/.tools/lowest" reqs="$ROOT/scripts/lowest-requirements.txt"
    say "lowest direct versions of pyproject.toml's ranges, on $(python3 --version)"
    "$UV" venv --quiet --clear --python python3 "$venv"
    "$UV" pip install --quiet --python "$venv/bin/python" --require-hashes -r "$reqs"
    "$UV" pip install --quiet --python "$venv/bin/python" --no-deps -e .
    say "installed: $(grep -E '^(aiohttp|gidgethub|pydantic|structlog|stamina|procrastinate|pytest)==' "$reqs" |
        cut -d' ' -f1 | tr '\n' ' ')"
    "$venv/bin/python" -m pytest -q -p no:cacheprovider "${PYTEST_ARGS[@]}"
}

# A Debian release's own python3 with git and what builds a C extension (the tests of compiled
# projects build one), on the base image from nothing; built once per engine.
compat_image() {
    local suite="$1" base="paritybot-test/base:$1" image="paritybot-test/compat:$1" name="paritybot-compat-build-$$"
    docker image inspect "$image" >/dev/null 2>&1 && return 0
    PARITYBOT_DEBIAN_SUITE="$suite" PARITYBOT_BASE_PACKAGES="python3,python3-venv,git" \
        scripts/build-base-image.sh "$base" >&2
    say "apt-get install gcc libc6-dev python3-dev -> $image"
    docker rm -f "$name" >/dev/null 2>&1 || true
    docker run --name "$name" "$base" /bin/sh -ec "apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends gcc libc6-dev python3-dev >/dev/null \
        && rm -rf /var/lib/apt/lists/*" >&2 || { docker rm -f "$name" >/dev/null; return 1; }
    docker commit "$name" "$image" >/dev/null
    docker rm "$name" >/dev/null
}

# A Debian release's own python3, in a container on the engine.
in_debian() {
    local suite="$1" image="paritybot-test/compat:$1" ca=()
    compat_image "$suite"
    [ -s /etc/ssl/certs/ca-certificates.crt ] &&
        ca=(-v /etc/ssl/certs/ca-certificates.crt:/run/ca.crt:ro -e SSL_CERT_FILE=/run/ca.crt)
    say "unit tests on Debian $suite's $(docker run --rm "$image" python3 --version)"
    # The checkout goes in as a copy (never mounted): the tests write caches and files beside it.
    tar -C "$ROOT" --exclude=./.venv --exclude=./.tools -cf - . |
        docker run --rm -i --name "paritybot-compat-$suite-$$" \
            -v "$UV:/usr/local/bin/uv:ro" -v "$UV_CACHE:/uv-cache" -e UV_CACHE_DIR=/uv-cache \
            -e UV_LINK_MODE=copy -e UV_PYTHON_DOWNLOADS=never -e UV_COMPILE_BYTECODE=1 "${ca[@]}" \
            "$image" /bin/sh -ec '
                mkdir /checkout && cd /checkout && tar -xf -
                uv sync --quiet --locked --extra test --python /usr/bin/python3
                exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"' sh "${PYTEST_ARGS[@]}"
}

case "$mode" in
lowest) lowest ;;
debian12) in_debian bookworm ;;
debian13) in_debian trixie ;;
all)
    # Each runs whatever the one before it found: a reader sees all three verdicts at once. Each in
    # a process of its own, where set -e holds (it does not inside a function called before ||).
    failed=()
    for one in lowest debian12 debian13; do
        bash "$ROOT/scripts/test-compat.sh" "$one" "$@" || failed+=("$one")
    done
    if [ ${#failed[@]} -gt 0 ]; then
        say "failed: ${failed[*]}"
        exit 1
    fi
    say "passed: lowest, debian12, debian13"
    ;;
*)
    echo "usage: $0 [all|lowest|debian12|debian13] [pytest arguments]" >&2
    exit 2
    ;;
esac
