"""The per-test line coverage map of a commit: which tests execute each line.

It is built by one step (:func:`coverage_step`) that runs the suite under coverage.py with one
dynamic context per test, and exports ``file → line → tests`` as JSON. Lines run outside any test
(module bodies executed while pytest collects, ``def`` and ``class`` lines) are kept apart as
*import-time* lines; the selection attributes them through the code's structure, because "ran
while importing" says nothing about which test depends on them. Lines that one test module's own
module-level code ran while pytest imported it (a command or schema built at module level) are
recorded with that module (``imported_by``): those lines matter to its tests only.

The map also records its health (tests collected, tests run, modules that did not collect), so
an empty or partial map says so instead of passing for a complete one.

:func:`parse_coverage_db` also reads a coverage.py SQLite data file recorded with
``pytest --cov-context=test`` (pytest-cov) or ``[run] dynamic_context = test_function``, so a map
can come from a project's own CI as well.

The script the step injects into the run is :mod:`runner.selection.coverage_driver`. A little past
400 lines: the map's model, the step, its parsers and its store share the one format.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import sqlite3
import tempfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.core.config import TestSettings
from bot.core.models import CoverageMapHealth
from runner.backends.base import PYTEST_BASETEMP, SCRATCH_DIR, Step, StepResult
from runner.checks.pytest_plugins import plugin_hint
from runner.selection.coverage_driver import DRIVER, MAP_FORMAT

log = structlog.get_logger(__name__)

# Version 1 had no health and no per-module import lines, version 2 no origins of import-time
# lines and no fixture contexts; both are still read (their lines are attributed as before).
READABLE_FORMATS = ("paritybot-coverage-map/1", "paritybot-coverage-map/2", MAP_FORMAT)
DRIVER_PATH = f"{SCRATCH_DIR}/coverage_driver.py"
OUTPUT_PATH = f"{SCRATCH_DIR}/coverage.json"
DATA_PATH = f"{SCRATCH_DIR}/coverage.sqlite"
# The map is parsed whole into Python objects: a 63 MB map (850,000 lines run by 20 tests each)
# takes the bot to 750 MiB while it is parsed. A map this large is a project of PyTorch's size.
COVERAGE_MAP_MAX_BYTES = 64_000_000
_SQLITE_MAGIC = b"SQLite format 3\x00"
_PHASE_SUFFIX = re.compile(r"\|(setup|run|call|teardown)$")
_COMMIT = re.compile(r"^[0-9a-fA-F]{7,64}$")


class CoverageMapError(ValueError):
    """The data is not a coverage map we can read; the message says what is wrong."""


class CoverageMap(BaseModel):
    """``file → line → tests`` of one commit, with test ids interned (the map is mostly repetition)."""

    model_config = ConfigDict(extra="forbid")

    format: str = MAP_FORMAT
    commit: str | None = None
    tests: list[str] = Field(default_factory=list, description="pytest node ids; lines refer to indexes")
    files: dict[str, dict[int, list[int]]] = Field(
        default_factory=dict, description="repository-relative path → line → indexes into tests"
    )
    import_lines: dict[str, list[int]] = Field(
        default_factory=dict, description="lines executed outside any test (imports, collection)"
    )
    imported_by: dict[str, dict[int, list[str]]] = Field(
        default_factory=dict,
        description="path → line → test files whose own module-level code ran it while pytest imported them",
    )
    built_by: dict[str, dict[int, list[str]]] = Field(
        default_factory=dict,
        description="path → import-time line → `module:line` of the top-level statements whose run (while"
        " that project module was imported) ran it; only lines every import-time run of which is known",
    )
    fixture_lines: dict[str, dict[int, list[str]]] = Field(
        default_factory=dict,
        description="path → line → fixtures wider than a test (session, module, class) whose setup ran it",
    )
    fixture_users: dict[str, list[int]] = Field(
        default_factory=dict, description="fixture name → indexes into tests of the tests that request it"
    )
    health: CoverageMapHealth | None = Field(None, description="None: a map recorded without it")
    unmapped: dict[str, list[int]] = Field(
        default_factory=dict,
        exclude=True,
        description="lines a newer commit has that the map's commit had not (a rebased map's blind spots)",
    )

    def tests_at(self, path: str, lines: Iterable[int]) -> set[str]:
        """Tests that executed any of ``lines`` of ``path``, or use a fixture whose setup did."""
        lines = list(lines)
        tests = self.ran_at(path, lines)
        for users in self.fixtures_at(path, lines).values():
            tests.update(users)
        return tests

    def ran_at(self, path: str, lines: Iterable[int]) -> set[str]:
        """Tests that executed any of ``lines`` of ``path`` themselves (their own setup, call, teardown)."""
        by_line = self.files.get(path, {})
        return {self.tests[i] for line in lines for i in by_line.get(line, ())}

    def fixtures_at(self, path: str, lines: Iterable[int]) -> dict[str, set[str]]:
        """Fixtures wider than a test whose setup ran any of ``lines``, each with the tests using it."""
        by_line = self.fixture_lines.get(path, {})
        names = {name for line in lines for name in by_line.get(line, ())}
        return {name: {self.tests[i] for i in self.fixture_users.get(name, ())} for name in sorted(names)}

    def tests_between(self, path: str, first: int, last: int) -> set[str]:
        """Tests that executed any line of ``path`` from ``first`` to ``last`` (a function's span),
        or use a fixture whose setup did."""
        by_line = self.files.get(path, {})
        tests = {self.tests[i] for line, ids in by_line.items() if first <= line <= last for i in ids}
        in_span = [n for n in self.fixture_lines.get(path, {}) if first <= n <= last]
        for users in self.fixtures_at(path, in_span).values():
            tests.update(users)
        return tests

    def tests_in_file(self, path: str) -> set[str]:
        return self.tests_between(path, 1, 10**9)

    def importers_at(self, path: str, lines: Iterable[int]) -> set[str]:
        """Test files whose import ran any of ``lines`` of ``path`` (their module-level code did)."""
        by_line = self.imported_by.get(path, {})
        return {t for line in lines for t in by_line.get(line, ())}

    def importers_between(self, path: str, first: int, last: int) -> set[str]:
        by_line = self.imported_by.get(path, {})
        return {t for line, files in by_line.items() if first <= line <= last for t in files}

    def holes(self) -> list[str]:
        """Test files of the suite the map has no record of (they did not collect, or did not run)."""
        return self.health.holes if self.health is not None else []

    def import_time(self, path: str, line: int) -> bool:
        return line in set(self.import_lines.get(path, ()))

    def built_from(self, path: str, lines: Iterable[int]) -> list[tuple[str, int]] | None:
        """The top-level statements (module path, line) whose run while their module was imported
        ran any of ``lines``; ``None`` when some import-time run of them has no known origin (a
        third-party module's body, pytest's own hooks, a map recorded before origins were)."""
        by_line = self.built_by.get(path, {})
        imported = set(self.import_lines.get(path, ()))
        found: set[tuple[str, int]] = set()
        for line in lines:
            if line not in imported:
                continue
            if line not in by_line:
                return None
            for origin in by_line[line]:
                module, _, at = origin.rpartition(":")
                if not module or not at.isdigit():
                    return None
                found.add((module, int(at)))
        return sorted(found)

    def source_files(self) -> list[str]:
        """Files of the project, other than the tests' own, that the session ran a line of: in a
        test, or while a test module imported it (a test may only read a module's constants)."""
        test_files = {t.split("::")[0] for t in self.tests}
        ran = {*self.files, *self.import_lines, *self.imported_by, *self.fixture_lines}
        return sorted(path for path in ran if path not in test_files)

    def knows(self, path: str) -> bool:
        """Whether the map has any record of the file (run by a test or while importing)."""
        return any(
            path in lines for lines in (self.files, self.import_lines, self.imported_by, self.fixture_lines)
        )


# --- Building the map: the step ----------------------------------------------------------------------


def coverage_step(settings: TestSettings, timeout_s: float = 3600) -> Step:
    """The step that runs the whole suite once under coverage and writes ``.paritybot/coverage.json``.

    Test failures do not spoil the map (a failing test still executed its lines), so callers
    should look for the collected file rather than the exit code. It needs ``coverage`` and
    ``pytest`` importable by the environment's ``python``.
    """
    paths = ":".join(p for p in settings.paths if p and ":" not in p)
    # A module that fails to import (an optional dependency) leaves a hole the map records,
    # rather than stopping the run with an empty map.
    argv = [
        "python", DRIVER_PATH, OUTPUT_PATH, DATA_PATH, paths,
        "-q", "-p", "no:cacheprovider", "--continue-on-collection-errors",
        # pytest collects where it would with no arguments; never paritybot's own scratch files
        # (a project's norecursedirs may not skip dot-directories, --doctest-modules imports all).
        f"--ignore={SCRATCH_DIR}",
    ]  # fmt: skip
    argv += [*settings.pytest_args, f"--basetemp={PYTEST_BASETEMP}"]  # ours win
    return Step(
        name="coverage-map",
        argv=argv,
        timeout_s=timeout_s,
        network=False,
        inject={DRIVER_PATH: DRIVER},
        collect=[OUTPUT_PATH],
        collect_max_bytes=COVERAGE_MAP_MAX_BYTES,
    )


def coverage_map_from_step(result: StepResult, commit: str | None = None) -> CoverageMap:
    """The map a finished :func:`coverage_step` produced.

    Raises:
        CoverageMapError: the step wrote no map (coverage missing, pytest crashed); the message
            carries the step's own failure and the tail of its output.
    """
    refused = result.refusal(OUTPUT_PATH, "the coverage map")
    if refused:
        raise CoverageMapError(refused)
    if result.stopped_by_limit:
        raise CoverageMapError(result.describe_failure())
    text = result.collected.get(OUTPUT_PATH)
    if text is None:
        tail = "\n".join(result.output.strip().splitlines()[-10:])
        raise CoverageMapError(
            f"no coverage map was written ({result.describe_failure()}):\n{tail}{plugin_hint(result.output)}"
        )
    cmap = parse_coverage_db(text)
    cmap.commit = commit
    return cmap


# --- Parsing -----------------------------------------------------------------------------------------


def parse_coverage_db(data: bytes | str, root: str | None = None) -> CoverageMap:
    """A coverage map from what the step wrote (JSON) or from a coverage.py SQLite data file.

    ``root`` makes the absolute paths of a SQLite file (recorded without ``relative_files``)
    repository-relative; files outside it are left out.

    Raises:
        CoverageMapError: the data is neither, or has no per-test contexts.
    """
    raw = data.encode() if isinstance(data, str) else data
    if raw.startswith(_SQLITE_MAGIC):
        return _parse_sqlite(raw, root)
    try:
        doc = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CoverageMapError(
            f"coverage data is neither JSON nor a coverage.py SQLite file: {exc}"
        ) from None
    if not isinstance(doc, dict) or doc.get("format") not in READABLE_FORMATS:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise CoverageMapError(f"unknown coverage map format {got!r}; expected {MAP_FORMAT!r}")
    try:
        cmap = CoverageMap.model_validate(doc)
    except ValidationError as exc:
        raise CoverageMapError(f"malformed coverage map: {exc.errors()[0]['msg']}") from None
    indexes = [i for by_line in cmap.files.values() for ids in by_line.values() for i in ids]
    indexes += [i for ids in cmap.fixture_users.values() for i in ids]
    if any(not 0 <= i < len(cmap.tests) for i in indexes):
        raise CoverageMapError(f"malformed coverage map: a test index outside its {len(cmap.tests)} tests")
    return _normalise(cmap)


def _parse_sqlite(raw: bytes, root: str | None) -> CoverageMap:
    conn = sqlite3.connect(":memory:")
    try:
        conn.deserialize(raw)
        files = dict(conn.execute("select id, path from file").fetchall())
        contexts = dict(conn.execute("select id, context from context").fetchall())
        tables = {r[0] for r in conn.execute("select name from sqlite_master where type='table'")}
        rows: list[tuple[int, int, set[int]]] = []
        if "line_bits" in tables:
            for file_id, ctx_id, bits in conn.execute("select file_id, context_id, numbits from line_bits"):
                rows.append((file_id, ctx_id, _numbits_to_lines(bits)))
        if "arc" in tables:  # branch coverage stores arcs; their positive ends are executed lines
            arcs: dict[tuple[int, int], set[int]] = {}
            for file_id, ctx_id, a, b in conn.execute("select file_id, context_id, fromno, tono from arc"):
                arcs.setdefault((file_id, ctx_id), set()).update(n for n in (a, b) if n > 0)
            rows.extend((f, c, lines) for (f, c), lines in arcs.items())
    except sqlite3.DatabaseError as exc:
        raise CoverageMapError(f"not a readable coverage.py data file: {exc}") from None
    finally:
        conn.close()
    return _from_rows(rows, files, contexts, root)


def _from_rows(
    rows: list[tuple[int, int, set[int]]], files: dict[int, str], contexts: dict[int, str], root: str | None
) -> CoverageMap:
    cmap = CoverageMap()
    index: dict[str, int] = {}
    per_test_contexts = False
    for file_id, ctx_id, lines in sorted(rows, key=lambda r: (files.get(r[0], ""), r[1])):
        path = _relative(files.get(file_id, ""), root)
        if path is None:
            continue
        nodeid = context_to_nodeid(contexts.get(ctx_id, ""))
        if nodeid is None:
            cmap.import_lines.setdefault(path, []).extend(lines)
            continue
        per_test_contexts = True
        if nodeid not in index:
            index[nodeid] = len(cmap.tests)
            cmap.tests.append(nodeid)
        by_line = cmap.files.setdefault(path, {})
        for line in lines:
            by_line.setdefault(line, []).append(index[nodeid])
    if rows and not per_test_contexts:
        raise CoverageMapError(
            "the coverage data has no per-test contexts; record it with `pytest --cov-context=test` "
            "or `[run] dynamic_context = test_function`"
        )
    return _normalise(cmap)


def _relative(path: str, root: str | None) -> str | None:
    if not path:
        return None
    if root is not None and os.path.isabs(path):
        rel = os.path.relpath(path, root)
        if rel.startswith(".."):
            return None
        path = rel
    return PurePosixPath(path.replace(os.sep, "/")).as_posix()


def context_to_nodeid(context: str) -> str | None:
    """A coverage context as a pytest node id; ``None`` for the empty (import-time) context.

    Handles ours (the node id itself), pytest-cov's ``nodeid|run`` and coverage.py's
    ``test_function`` form ``tests.test_ops.TestScale.test_big`` (parametrized cases are not
    told apart in that form, so they map to the function).
    """
    if not context:
        return None
    context = _PHASE_SUFFIX.sub("", context)
    if "::" in context or context.endswith(".py"):
        return context
    parts = context.split(".")
    # The module ends at the last part named like a test file; classes and the function follow.
    for cut in range(len(parts) - 1, 0, -1):
        name = parts[cut - 1]
        if name.startswith("test_") or name.endswith("_test") or name == "tests":
            module = "/".join(parts[:cut]) + ".py"
            return "::".join([module, *parts[cut:]])
    return context


def _numbits_to_lines(numbits: bytes) -> set[int]:
    """coverage.py's numbits: bit ``n`` of the blob set means line ``n`` was executed."""
    lines = set()
    for byte_index, byte in enumerate(numbits):
        for bit in range(8):
            if byte & (1 << bit):
                lines.add(byte_index * 8 + bit)
    return lines


def _normalise(cmap: CoverageMap) -> CoverageMap:
    """Sorted, de-duplicated line lists and test indexes, so equal maps serialise equally."""
    cmap.files = {
        path: {line: sorted(set(ids)) for line, ids in sorted(by_line.items())}
        for path, by_line in sorted(cmap.files.items())
    }
    cmap.import_lines = {path: sorted(set(lines)) for path, lines in sorted(cmap.import_lines.items())}
    cmap.imported_by = {
        path: {line: sorted(set(files)) for line, files in sorted(by_line.items())}
        for path, by_line in sorted(cmap.imported_by.items())
    }
    cmap.built_by = {
        path: {line: sorted(set(origins)) for line, origins in sorted(by_line.items())}
        for path, by_line in sorted(cmap.built_by.items())
    }
    cmap.fixture_lines = {
        path: {line: sorted(set(names)) for line, names in sorted(by_line.items())}
        for path, by_line in sorted(cmap.fixture_lines.items())
    }
    cmap.fixture_users = {name: sorted(set(ids)) for name, ids in sorted(cmap.fixture_users.items())}
    cmap.format = MAP_FORMAT
    return cmap


# --- Persistence -------------------------------------------------------------------------------------


class CoverageMapStore:
    """Maps on disk, one gzip-compressed JSON file per commit."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = Path(cache_dir)

    def _path(self, commit: str) -> Path:
        if not _COMMIT.match(commit):
            raise ValueError(f"not a commit sha: {commit!r}")
        return self.cache_dir / f"{commit.lower()}.json.gz"

    def save(self, commit: str, cmap: CoverageMap) -> Path:
        """Write atomically (a reader never sees half a map); returns the file written."""
        target = self._path(commit)
        target.parent.mkdir(parents=True, exist_ok=True)
        stored = cmap.model_copy(update={"commit": commit})
        payload = gzip.compress(stored.model_dump_json().encode(), compresslevel=6)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".json.gz")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        log.info("coverage map saved", commit=commit, tests=len(cmap.tests), files=len(cmap.files))
        return target

    def load(self, commit: str) -> CoverageMap | None:
        """The map of ``commit``, or ``None`` when there is none or it cannot be read (logged)."""
        path = self._path(commit)
        if path.is_symlink():
            # PARITYBOT_COVERAGE_DIR may name a directory inside a checkout, where a pull request
            # could commit a link to any file of the machine: never follow one.
            log.warning("coverage map is a symbolic link; ignoring it", path=str(path))
            return None
        if not path.is_file():
            return None
        try:
            cmap = parse_coverage_db(gzip.decompress(path.read_bytes()))
        except (OSError, EOFError, CoverageMapError) as exc:
            log.warning("coverage map unreadable; ignoring it", path=str(path), error=str(exc))
            return None
        cmap.commit = commit
        return cmap
