#!/usr/bin/env bash
# Refresh the locked dependencies: the newest versions pyproject.toml allows, the files written from
# the lock (and the test image's and the lowest-direct resolutions, compiled anew), a CHANGELOG
# line saying what moved, then the whole suite (scripts/test.sh, which also
# runs the unit tests on every claimed Python and at the lowest declared versions).
#
#   scripts/update-deps.sh                 # everything
#   scripts/update-deps.sh --package NAME  # only NAME (and what it needs) moves
#   scripts/update-deps.sh --no-test       # the lock and its files only
#
# Nothing is committed: read `git diff`, then commit uv.lock with the files and the CHANGELOG line.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

upgrade=(--upgrade)
run_tests=1
while [ $# -gt 0 ]; do
    case "$1" in
    --package) upgrade=(--upgrade-package "${2:?--package needs a name}"); shift ;;
    --no-test) run_tests=0 ;;
    *) echo "usage: $0 [--package NAME] [--no-test]" >&2; exit 2 ;;
    esac
    shift
done

export UV_PYTHON_DOWNLOADS=never
UV="$(scripts/uv.sh)"
pins() { "$UV" export --frozen --all-extras --all-groups --no-emit-project --no-hashes --no-header --no-annotate |
    sed -n 's/^\([A-Za-z0-9._-]*\)==\([^ ;]*\).*/\1 \2/p' | sort -u; }

before="$(pins)"
"$UV" lock --quiet "${upgrade[@]}"
# A full refresh resolves the compiled files anew too (a kept file is only a preference).
[ "${upgrade[0]}" != --upgrade ] || rm -f scripts/test-image-requirements.txt scripts/lowest-requirements.txt
# uv itself is pinned by the lock: the next run of scripts/uv.sh installs the new one.
.tools/bin/python scripts/lock_exports.py "$UV"
after="$(pins)"

# Per package, its versions before and after (a universal lock may hold two, for different Pythons).
moved="$(awk '
    FNR == 1 { side++ }
    { v[side, $1] = v[side, $1] (v[side, $1] == "" ? "" : "/") $2; names[$1] = 1 }
    END {
        for (n in names) if (v[1, n] != v[2, n])
            printf "%s%s %s → %s", (out++ ? ", " : ""), n, (v[1, n] == "" ? "new" : v[1, n]), (v[2, n] == "" ? "gone" : v[2, n])
    }' <(echo "$before") <(echo "$after"))"
if [ -z "$moved" ]; then
    echo "update-deps: nothing moved" >&2
else
    line="- Dependencies locked anew ($(date -u +%Y-%m-%d)): $moved."
    # First under "### Changed" of the unreleased section (the first "## " heading).
    awk -v line="$line" '
        /^## / { section++ }
        { print }
        section == 1 && !done && /^### Changed/ { getline; print; print line; done = 1 }
        END { if (!done) exit 1 }' CHANGELOG.md >CHANGELOG.md.new ||
        { echo "update-deps: CHANGELOG.md has no '### Changed' under its first release heading" >&2; exit 1; }
    mv CHANGELOG.md.new CHANGELOG.md
    echo "update-deps: $moved" >&2
fi

if [ "$run_tests" -eq 1 ]; then
    bash scripts/test.sh
fi
