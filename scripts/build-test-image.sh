#!/usr/bin/env bash
# Build the local images the container-runner tests use, from nothing (no registry is needed).
#
#   scripts/build-test-image.sh            # builds paritybot-test/python:bookworm unless present
#   scripts/build-test-image.sh --force    # rebuild even if present
#
# Stage 1: a minimal Debian bookworm root file system (debootstrap) with python3, python3-venv and
#          git, imported as paritybot-test/base:bookworm. The root file system tarball is cached in
#          $PARITYBOT_IMAGE_CACHE (default /tmp/paritybot-image-cache), so a second build on a fresh
#          engine skips the ~75 s of debootstrap and apt.
# Stage 2: on top of it, a virtual environment at /opt/venv (first on PATH) with pytest,
#          pytest-timeout, coverage and pre-commit from PyPI, the tools the runner's checks call.
#
# The engine is whatever DOCKER_HOST names (scripts/docker-engine.sh env). Needs root for
# debootstrap and chroot. The Debian mirror is the one apt on this machine already uses, or
# $PARITYBOT_DEBIAN_MIRROR.
set -euo pipefail

IMAGE="${PARITYBOT_TEST_IMAGE:-paritybot-test/python:bookworm}"
BASE_IMAGE="paritybot-test/base:bookworm"
CACHE_DIR="${PARITYBOT_IMAGE_CACHE:-/tmp/paritybot-image-cache}"
SUITE="bookworm"
PACKAGES="python3,python3-venv,git"
# Pinned so the tests can assert exactly what the probe must report from inside the image.
PIP_PACKAGES="${PARITYBOT_TEST_PIP_PACKAGES:-pytest==8.3.4 pytest-timeout==2.3.1 coverage==7.6.10 pre-commit==4.0.1}"
ROOTFS_TAR="$CACHE_DIR/rootfs-$SUITE-${PACKAGES//,/-}.tar"
FORCE=0
[ "${1:-}" = "--force" ] && FORCE=1

say() { echo "build-test-image: $*" >&2; }
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

# The mirror apt already uses: deb822 sources first (Debian 12's default), then the one-line format.
# Security and updates suites are skipped: debootstrap needs the main archive.
debian_mirror() {
    if [ -n "${PARITYBOT_DEBIAN_MIRROR:-}" ]; then
        echo "$PARITYBOT_DEBIAN_MIRROR"
        return
    fi
    local uri=""
    shopt -s nullglob
    for f in /etc/apt/sources.list.d/*.sources; do
        uri="$(awk '
            /^URIs:/ { uris = $2 }
            /^Suites:/ { for (i = 2; i <= NF; i++) if ($i !~ /-(security|updates|backports)$/) main = 1 }
            /^$/ { if (main && uris ~ /debian\/?$/) { print uris; exit } uris = ""; main = 0 }
            END { if (main && uris ~ /debian\/?$/) print uris }
        ' "$f" | head -n1)"
        [ -n "$uri" ] && break
    done
    if [ -z "$uri" ]; then
        for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
            [ -f "$f" ] || continue
            uri="$(awk '$1 == "deb" && $3 !~ /-(security|updates|backports)$/ && $2 ~ /debian\/?$/ \
                { print $2; exit }' "$f")"
            [ -n "$uri" ] && break
        done
    fi
    shopt -u nullglob
    echo "${uri:-http://deb.debian.org/debian}"
}

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

ensure_tools() {
    local missing=()
    command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
    command -v docker >/dev/null 2>&1 || missing+=(docker.io)
    [ "${#missing[@]}" -eq 0 ] && return 0
    say "installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# A subshell body, so the EXIT trap removes the half-built root whether debootstrap fails or not.
build_rootfs_tar() (
    local mirror root
    mirror="$(debian_mirror)"
    root="$(mktemp -d "${TMPDIR:-/tmp}/paritybot-rootfs.XXXXXX")"
    trap '$SUDO rm -rf "$root"' EXIT
    say "debootstrap $SUITE from $mirror"
    $SUDO debootstrap --variant=minbase "$SUITE" "$root" "$mirror" >"$CACHE_DIR/debootstrap.log" 2>&1 || {
        tail -n 20 "$CACHE_DIR/debootstrap.log" >&2
        return 1
    }
    $SUDO cp /etc/resolv.conf "$root/etc/resolv.conf"
    say "apt-get install ${PACKAGES//,/ }"
    $SUDO chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends ${PACKAGES//,/ } >"$CACHE_DIR/apt.log" 2>&1 || {
        tail -n 20 "$CACHE_DIR/apt.log" >&2
        return 1
    }
    # Small image: no package lists, no downloaded .debs, no docs; the host's resolver stays out.
    $SUDO chroot "$root" apt-get clean
    $SUDO rm -rf "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* "$root"/usr/share/man/* \
        "$root"/usr/share/info/* "$root"/usr/share/locale/* "$root"/var/cache/apt/*.bin \
        "$root"/var/log/*.log "$root"/var/cache/debconf/*-old
    : | $SUDO tee "$root/etc/resolv.conf" >/dev/null
    $SUDO tar -C "$root" --numeric-owner -cf "$ROOTFS_TAR.partial" .
    mv "$ROOTFS_TAR.partial" "$ROOTFS_TAR"
)

build_base() {
    if have_image "$BASE_IMAGE" && [ "$FORCE" -eq 0 ]; then
        return 0
    fi
    if [ ! -s "$ROOTFS_TAR" ] || [ "$FORCE" -eq 1 ]; then
        build_rootfs_tar
    else
        say "using cached root file system $ROOTFS_TAR"
    fi
    say "docker import -> $BASE_IMAGE"
    local old
    old="$(docker image inspect --format '{{.Id}}' "$BASE_IMAGE" 2>/dev/null || true)"
    docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["/bin/bash"]' \
        "$ROOTFS_TAR" "$BASE_IMAGE" >/dev/null
    if [ -n "$old" ] && [ "$old" != "$(docker image inspect --format '{{.Id}}' "$BASE_IMAGE")" ]; then
        docker image rm "$old" >/dev/null 2>&1 || true
    fi
}

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
    say "pip install into /opt/venv -> $IMAGE ($PIP_PACKAGES)"
    local ca name="paritybot-test-build-$$" pip_args=(--no-cache-dir --quiet)
    local mounts=()
    ca="$(ca_bundle)"
    if [ -n "$ca" ]; then
        mounts=(-v "$ca:/run/paritybot-ca.crt:ro")
        pip_args+=(--cert /run/paritybot-ca.crt)
    fi
    [ -n "${PIP_INDEX_URL:-}" ] && pip_args+=(--index-url "$PIP_INDEX_URL")
    docker rm -f "$name" >/dev/null 2>&1 || true
    # shellcheck disable=SC2086  # PIP_PACKAGES is a space-separated list on purpose
    if ! docker run --name "$name" "${mounts[@]}" "$BASE_IMAGE" /bin/sh -ec \
        "python3 -m venv /opt/venv && /opt/venv/bin/pip install ${pip_args[*]} $PIP_PACKAGES \
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
        "$name" "$IMAGE" >/dev/null
    docker rm "$name" >/dev/null
    # A forced rebuild leaves the previous image untagged; remove it if nothing else uses it.
    if [ -n "$old" ] && [ "$old" != "$(docker image inspect --format '{{.Id}}' "$IMAGE")" ]; then
        docker image rm "$old" >/dev/null 2>&1 || true
    fi
}

main() {
    if have_image "$IMAGE" && [ "$FORCE" -eq 0 ]; then
        say "$IMAGE already present"
        return 0
    fi
    ensure_tools
    mkdir -p "$CACHE_DIR"
    local started=$SECONDS
    build_base
    build_image
    say "built $IMAGE in $((SECONDS - started))s"
}

main
