#!/usr/bin/env bash
# Build the local images the container-runner tests use, from nothing (no registry is needed).
#
#   scripts/build-test-image.sh            # builds paritybot-test/python:bookworm unless present
#   scripts/build-test-image.sh --force    # rebuild even if present
#
# Stage 1: scripts/build-base-image.sh: a minimal Debian bookworm root file system (debootstrap)
#          with python3, python3-venv and git, imported as paritybot-test/base:bookworm. The root
#          file system tarball is cached in $PARITYBOT_IMAGE_CACHE (default
#          /tmp/paritybot-image-cache), so a second build on a fresh engine skips the ~75 s of
#          debootstrap and apt.
# Stage 2: on top of it, a virtual environment at /opt/venv (first on PATH) with pytest,
#          pytest-timeout, coverage and pre-commit from PyPI, the tools the runner's checks call,
#          exactly as scripts/test-image-requirements.txt pins them (hashes checked). The image
#          carries that file's digest: an image built from another version of it is rebuilt.
#
# The engine is whatever DOCKER_HOST names (scripts/docker-engine.sh env). Needs root for
# debootstrap and chroot. The Debian mirror is the one apt on this machine already uses, or
# $PARITYBOT_DEBIAN_MIRROR.
set -euo pipefail

IMAGE="${PARITYBOT_TEST_IMAGE:-paritybot-test/python:bookworm}"
BASE_IMAGE="paritybot-test/base:bookworm"
SSHD_IMAGE="${PARITYBOT_TEST_SSHD_IMAGE:-paritybot-test/python-sshd:bookworm}"
# What the runner's tests need; the deploy base (build-base-image.sh's default) adds ca-certificates.
BASE_PACKAGES="python3,python3-venv,git"
# Pinned so the tests can assert exactly what the probe must report from inside the image.
REQUIREMENTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/test-image-requirements.txt"
REQUIREMENTS_DIGEST="$(sha256sum "$REQUIREMENTS" | cut -c1-16)"
FORCE=0
[ "${1:-}" = "--force" ] && FORCE=1

say() { echo "build-test-image: $*" >&2; }
have_image() { docker image inspect "$1" >/dev/null 2>&1; }

# The CA bundle pip must trust: the host's, so a TLS-inspecting egress proxy works inside the build
# too. The base image has no ca-certificates package and pip's own bundle would not know that proxy.
ca_bundle() {
    local f
    for f in "${PIP_CERT:-}" "${SSL_CERT_FILE:-}" "${REQUESTS_CA_BUNDLE:-}" /etc/ssl/certs/ca-certificates.crt; do
        if [ -n "$f" ] && [ -s "$f" ]; then
            echo "$f"
            return
        fi
    done
}

# docker run + commit rather than docker build: the CA bundle is bind-mounted for the install only,
# so it never lands in a layer, and no build context leaves the checkout.
build_image() {
    say "pip install into /opt/venv -> $IMAGE ($(grep -c '^[a-z].*==' "$REQUIREMENTS") packages, hashes checked)"
    local ca name="paritybot-test-build-$$" pip_args=(--no-cache-dir --quiet --require-hashes)
    local mounts=(-v "$REQUIREMENTS:/run/paritybot-requirements.txt:ro")
    ca="$(ca_bundle)"
    if [ -n "$ca" ]; then
        mounts+=(-v "$ca:/run/paritybot-ca.crt:ro")
        pip_args+=(--cert /run/paritybot-ca.crt)
    fi
    [ -n "${PIP_INDEX_URL:-}" ] && pip_args+=(--index-url "$PIP_INDEX_URL")
    docker rm -f "$name" >/dev/null 2>&1 || true
    if ! docker run --name "$name" "${mounts[@]}" "$BASE_IMAGE" /bin/sh -ec \
        "python3 -m venv /opt/venv \
         && /opt/venv/bin/pip install ${pip_args[*]} -r /run/paritybot-requirements.txt \
         && find /opt/venv -name __pycache__ -prune -exec rm -rf {} +"; then
        docker rm -f "$name" >/dev/null 2>&1 || true
        say "pip install failed"
        return 1
    fi
    local old
    old="$(docker image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
    docker commit \
        --change 'ENV VIRTUAL_ENV=/opt/venv' \
        --change 'ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV PIP_DISABLE_PIP_VERSION_CHECK=1' \
        --change 'CMD ["/bin/bash"]' \
        --change 'LABEL org.opencontainers.image.title="paritybot test image"' \
        --change "LABEL dev.paritybot.requirements=$REQUIREMENTS_DIGEST" \
        "$name" "$IMAGE" >/dev/null
    docker rm "$name" >/dev/null
    # A forced rebuild leaves the previous image untagged; remove it if nothing else uses it.
    if [ -n "$old" ] && [ "$old" != "$(docker image inspect --format '{{.Id}}' "$IMAGE")" ]; then
        docker image rm "$old" >/dev/null 2>&1 || true
    fi
}

# Stage 3: the test image with openssh-server and an account for uid 1000, as CI images built for
# interactive debugging have: `paritybot repro --ssh` is tested in it. Debian's package, from the
# same mirror.
build_sshd_image() {
    local name="paritybot-test-sshd-build-$$"
    say "apt-get install openssh-server -> $SSHD_IMAGE"
    docker rm -f "$name" >/dev/null 2>&1 || true
    if ! docker run --name "$name" --user 0 "$IMAGE" /bin/sh -ec \
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
         openssh-server >/dev/null && rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_* \
         && useradd --uid 1000 --user-group --home-dir /paritybot/home --no-create-home --shell /bin/bash dev"; then
        docker rm -f "$name" >/dev/null 2>&1 || true
        say "installing openssh-server failed"
        return 1
    fi
    docker commit --change 'USER root' "$name" "$SSHD_IMAGE" >/dev/null
    docker rm "$name" >/dev/null
}

built_from() { docker image inspect --format '{{index .Config.Labels "dev.paritybot.requirements"}}' "$IMAGE"; }

main() {
    if have_image "$IMAGE" && [ "$FORCE" -eq 0 ] && [ "$(built_from)" = "$REQUIREMENTS_DIGEST" ]; then
        say "$IMAGE already present"
        have_image "$SSHD_IMAGE" || build_sshd_image
        return 0
    fi
    local started=$SECONDS force=()
    [ "$FORCE" -eq 1 ] && force=(--force)
    [ "$FORCE" -eq 0 ] && have_image "$IMAGE" && say "$IMAGE was built from other requirements: rebuilding"
    PARITYBOT_BASE_PACKAGES="$BASE_PACKAGES" "$(dirname "${BASH_SOURCE[0]}")/build-base-image.sh" \
        "${force[@]}" "$BASE_IMAGE"
    build_image
    docker image rm "$SSHD_IMAGE" >/dev/null 2>&1 || true  # it was built on the old one
    build_sshd_image
    say "built $IMAGE and $SSHD_IMAGE in $((SECONDS - started))s"
}

main
