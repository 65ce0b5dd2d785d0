#!/usr/bin/env bash
# Print the path of the uv this project pins, installing it first when it is missing or another
# version: pip checks it against the hashes in scripts/uv-requirements.txt (written from uv.lock by
# scripts/update-deps.sh). uv then installs everything else from uv.lock, hashes checked.
#
#   UV="$(scripts/uv.sh)"
#
# It lives in its own virtual environment, $PARITYBOT_TOOLS_DIR (default .tools in the checkout).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

TOOLS="${PARITYBOT_TOOLS_DIR:-$PWD/.tools}"
want="$(sed -n 's/^uv==\([^ ]*\).*/\1/p' scripts/uv-requirements.txt)"
have="$("$TOOLS/bin/uv" --version 2>/dev/null | cut -d' ' -f2 || true)"
if [ "$have" != "$want" ]; then
    # Debian's python3 comes without venv until python3-venv is installed (scripts/test.sh does).
    python3 -m venv --clear "$TOOLS" >&2
    "$TOOLS/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir \
        --require-hashes -r scripts/uv-requirements.txt >&2
fi
echo "$TOOLS/bin/uv"
