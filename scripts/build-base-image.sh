#!/usr/bin/env bash
# Build a Debian base image from nothing, for sites that reach no container registry.
#
#   scripts/build-base-image.sh                          # paritybot/base:bookworm, unless present
#   scripts/build-base-image.sh --force my/base:bookworm # rebuild, under another name
#
# A minimal Debian bookworm root file system (debootstrap --variant=minbase) with python3,
# python3-venv, git and ca-certificates, imported into the engine that DOCKER_HOST names (or the
# default socket). It is a BASE_IMAGE for the paritybot image:
#
#   docker build --build-arg BASE_IMAGE=paritybot/base:bookworm -t paritybot:latest .
#
# Packages come from the Debian mirror apt on this machine already uses, or $PARITYBOT_DEBIAN_MIRROR;
# PARITYBOT_BASE_PACKAGES (comma-separated) replaces the package list. The root file system
# tarball is cached in $PARITYBOT_IMAGE_CACHE (default /tmp/paritybot-image-cache), so a second
# build on a fresh engine skips debootstrap and apt. Needs root (or sudo) for debootstrap and
# chroot; installs debootstrap from Debian if it is missing.
set -euo pipefail

FORCE=0
if [ "${1:-}" = "--force" ]; then
    FORCE=1
    shift
fi
IMAGE="${1:-paritybot/base:${PARITYBOT_DEBIAN_SUITE:-bookworm}}"
CACHE_DIR="${PARITYBOT_IMAGE_CACHE:-/tmp/paritybot-image-cache}"
# Debian 12 (bookworm, python3 3.11.2) unless asked for another release: scripts/test-compat.sh
# builds Debian 13 (trixie, python3 3.13) for the newest Python the project claims.
SUITE="${PARITYBOT_DEBIAN_SUITE:-bookworm}"
PACKAGES="${PARITYBOT_BASE_PACKAGES:-python3,python3-venv,git,ca-certificates}"
ROOTFS_TAR="$CACHE_DIR/rootfs-$SUITE-${PACKAGES//,/-}.tar"

say() { echo "build-base-image: $*" >&2; }
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

main() {
    if have_image "$IMAGE" && [ "$FORCE" -eq 0 ]; then
        say "$IMAGE already present"
        return 0
    fi
    ensure_tools
    mkdir -p "$CACHE_DIR"
    if [ ! -s "$ROOTFS_TAR" ] || [ "$FORCE" -eq 1 ]; then
        build_rootfs_tar
    else
        say "using cached root file system $ROOTFS_TAR"
    fi
    say "docker import -> $IMAGE"
    local old
    old="$(docker image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
    docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["/bin/bash"]' \
        "$ROOTFS_TAR" "$IMAGE" >/dev/null
    # A rebuild leaves the previous image untagged; remove it if nothing else uses it.
    if [ -n "$old" ] && [ "$old" != "$(docker image inspect --format '{{.Id}}' "$IMAGE")" ]; then
        docker image rm "$old" >/dev/null 2>&1 || true
    fi
}

main
