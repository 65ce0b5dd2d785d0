"""The locked dependencies: uv.lock agrees with pyproject.toml, every file written from it is up to
date, and pyproject.toml keeps a library's ranges (the lock pins; the project declares what it
supports, and scripts/test-compat.sh tests the lowest of it)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# uv is a test dependency, so it sits beside the interpreter running the tests, at the lock's version.
UV = str(Path(sys.executable).parent / "uv")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _uv(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([UV, *args], cwd=ROOT, capture_output=True, text=True, check=False)


def test_the_lock_matches_pyproject_without_resolving_anew() -> None:
    result = _uv("lock", "--check", "--offline")
    assert result.returncode == 0, result.stderr


def test_the_files_written_from_the_lock_are_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, "scripts/lock_exports.py", UV, "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_the_lock_pins_every_package_with_hashes() -> None:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    from_index = [p for p in lock["package"] if "registry" in p["source"]]
    assert len(from_index) > 50
    unhashed = [p["name"] for p in from_index if not (p.get("wheels") or p.get("sdist"))]
    assert unhashed == []
    for path in ("deploy/requirements.txt", "deploy/build-requirements.txt", "scripts/uv-requirements.txt"):
        text = (ROOT / path).read_text()
        pins = re.findall(r"^([A-Za-z0-9._-]+)==\S+", text, re.M)
        assert pins, path
        assert text.count("==") <= text.count("--hash=sha256:"), f"{path}: a pin without a hash"


def test_pyproject_declares_ranges_with_a_floor_not_pins() -> None:
    declared = PYPROJECT["project"]["dependencies"] + [
        d for extra in PYPROJECT["project"]["optional-dependencies"].values() for d in extra
    ]
    for requirement in declared:
        assert "==" not in requirement, f"{requirement}: a library declares a range; the lock pins"
    unbounded = [r for r in declared if ">=" not in r and not r.startswith("types-")]
    assert unbounded == [], "each dependency names the oldest version the lowest-direct run tests"


def test_the_claimed_pythons_are_the_tested_ones() -> None:
    # scripts/test-compat.sh runs the unit tests on Debian 12's python3 (3.11.2) and Debian 13's (3.13).
    assert PYPROJECT["project"]["requires-python"] == ">=3.11.2"
    classifiers = [c for c in PYPROJECT["project"]["classifiers"] if c.startswith("Programming Language")]
    assert [c.rsplit(" :: ", 1)[1] for c in classifiers if "." in c] == ["3.11", "3.12", "3.13"]
    compat = (ROOT / "scripts" / "test-compat.sh").read_text()
    assert "in_debian bookworm" in compat and "in_debian trixie" in compat
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "python3 (>= 3.11.2" in dockerfile
