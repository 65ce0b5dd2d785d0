"""The requirements files written from uv.lock, for installers that do not read it.

    python scripts/lock_exports.py UV           # write them (scripts/update-deps.sh does)
    python scripts/lock_exports.py UV --check   # exit 1 naming each file that differs from the lock

UV is the path of uv (scripts/uv.sh prints it). Every file pins exact versions with hashes, so pip
installs them with ``--require-hashes`` and gets what the last green run had:

- scripts/uv-requirements.txt: uv itself, which scripts/uv.sh installs with pip before anything else;
- deploy/requirements.txt: the service's runtime dependencies, which the Dockerfile installs;
- deploy/build-requirements.txt: what the wheel is built with (the ``build`` dependency group);
- scripts/test-image-requirements.txt: the tools of the test image (scripts/build-test-image.sh),
  resolved from scripts/test-image-requirements.in for Debian 12's Python. It is not part of the
  project's lock (its pins are older than the project's own pytest), so it is compiled, which needs
  the package index; ``--check`` only checks that it still pins what the ``.in`` file names.
- scripts/lowest-requirements.txt: the lowest versions pyproject.toml allows for its direct
  dependencies, with what they need (``--resolution lowest-direct``), which scripts/test-compat.sh
  tests. Compiled too, and kept: the lowest run installs the same packages on every machine, and
  the next refresh starts from them. ``--check`` checks that it pins every direct dependency.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADER = "# Written from uv.lock by scripts/lock_exports.py (scripts/update-deps.sh): do not edit.\n"
TEST_IMAGE_IN = ROOT / "scripts" / "test-image-requirements.in"
TEST_IMAGE_TXT = ROOT / "scripts" / "test-image-requirements.txt"
# The oldest Python the project claims: the test image is Debian 12's.
TEST_IMAGE_PYTHON = "3.11"
LOWEST_TXT = ROOT / "scripts" / "lowest-requirements.txt"


def uv_requirements(lock_text: str) -> str:
    """uv's own line, with the hash of every file the lock knows for it."""
    lock = tomllib.loads(lock_text)
    (uv,) = (p for p in lock["package"] if p["name"] == "uv")
    hashes = sorted({w["hash"] for w in uv.get("wheels", [])} | {uv["sdist"]["hash"]})
    lines = [f"uv=={uv['version']}"] + [f"    --hash={h}" for h in hashes]
    return HEADER + " \\\n".join(lines) + "\n"


def exported(uv: str, *selection: str) -> str:
    """``uv export`` of the lock as it stands (never re-resolved), with hashes."""
    out = subprocess.run(
        [
            uv,
            "export",
            "--frozen",
            "--no-emit-project",
            "--no-header",
            "--format",
            "requirements-txt",
            *selection,
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return HEADER + out


def from_lock(uv: str) -> dict[Path, str]:
    """Each file that is a pure function of uv.lock, and its text."""
    lock_text = (ROOT / "uv.lock").read_text()
    return {
        ROOT / "scripts" / "uv-requirements.txt": uv_requirements(lock_text),
        ROOT / "deploy" / "requirements.txt": exported(uv, "--no-dev"),
        ROOT / "deploy" / "build-requirements.txt": exported(uv, "--only-group", "build"),
    }


def compile_test_image(uv: str) -> None:
    """The test image's tools and everything they need, pinned with hashes for Debian 12's Python."""
    options = [
        "--quiet",
        "--universal",
        "--generate-hashes",
        "--no-header",
        "--python-version",
        TEST_IMAGE_PYTHON,
    ]
    subprocess.run(
        [uv, "pip", "compile", *options, str(TEST_IMAGE_IN), "-o", str(TEST_IMAGE_TXT)],
        cwd=ROOT,
        check=True,
    )
    TEST_IMAGE_TXT.write_text(
        "# Compiled from test-image-requirements.in by scripts/lock_exports.py: do not edit.\n"
        + TEST_IMAGE_TXT.read_text()
    )


def compile_lowest(uv: str) -> None:
    """The lowest versions of the direct dependencies' ranges (the test extra too), pinned with hashes."""
    options = [
        "--quiet",
        "--generate-hashes",
        "--no-header",
        "--resolution",
        "lowest-direct",
        "--extra",
        "test",
    ]
    subprocess.run(
        [uv, "pip", "compile", *options, "--python", "python3", "pyproject.toml", "-o", str(LOWEST_TXT)],
        cwd=ROOT,
        check=True,
    )
    LOWEST_TXT.write_text(
        "# Compiled from pyproject.toml's floors by scripts/lock_exports.py: do not edit.\n"
        + LOWEST_TXT.read_text()
    )


def lowest_pins_missing() -> list[str]:
    """The direct dependencies the lowest-direct file does not pin."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["dependencies"] + [
        d for extra in project["optional-dependencies"].values() for d in extra
    ]
    names = {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower().replace("_", "-") for d in declared}
    text = LOWEST_TXT.read_text() if LOWEST_TXT.exists() else ""
    pinned = {m.lower().replace("_", "-") for m in re.findall(r"^([A-Za-z0-9._-]+)==", text, re.M)}
    return sorted(names - pinned)


def test_image_pins_missing() -> list[str]:
    """The ``name==version`` lines of the ``.in`` file that the compiled file does not pin."""
    compiled = {line.split()[0] for line in TEST_IMAGE_TXT.read_text().splitlines() if "==" in line}
    wanted = [line.split("#")[0].strip() for line in TEST_IMAGE_IN.read_text().splitlines()]
    return [pin for pin in wanted if pin and pin not in compiled]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("uv", help="the path of uv (scripts/uv.sh prints it)")
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    stale = [path for path, text in from_lock(args.uv).items() if not _same(path, text, write=not args.check)]
    if args.check:
        stale += [TEST_IMAGE_TXT] if test_image_pins_missing() else []
        stale += [LOWEST_TXT] if lowest_pins_missing() else []
        for path in stale:
            print(
                f"{path.relative_to(ROOT)} differs from uv.lock: run scripts/update-deps.sh", file=sys.stderr
            )
        return 1 if stale else 0
    compile_test_image(args.uv)
    compile_lowest(args.uv)
    return 0


def _same(path: Path, text: str, *, write: bool) -> bool:
    same = path.exists() and path.read_text() == text
    if write and not same:
        path.write_text(text)
    return same


if __name__ == "__main__":
    sys.exit(main())
