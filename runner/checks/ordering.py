"""First failure first: the selected tests in the order most likely to fail, for pytest to run.

Ordering never changes which tests run, only when: the plugin (``--paritybot-order FILE``) sorts
pytest's items by the first id of this list that names them, keeping pytest's own order among
equals and for the tests the list does not name. Most likely to fail first:

1. tests that failed in this pull request's previous run, and tests in files the change adds or
   edits (a changed test is the likeliest to fail, and the one its author waits for);
2. the rest of the selection: the tests whose recorded coverage is narrowest first (a test that
   runs few lines tests the changed code most directly; an end-to-end test that runs half the
   project fails later, if at all), then the selection's own order (strongest signal first); with
   the whole suite selected, the coverage map's tests that ran the changed lines, narrowest first,
   lead the suite;
3. tests selected only because ``tests.always_run`` names them, last.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from bot.core.models import Selection
from runner import gitdiff
from runner.gitdiff import FileStatus
from runner.selection.coverage_map import CoverageMap

ALWAYS_RUN_REASON = "always run (tests.always_run"


def changed_test_files(repo: Path, base: str, head: str, roots: list[str]) -> set[str]:
    """Python test files (under the test roots, or named as pytest collects them by default when
    no root is configured) that the change adds or edits."""
    return {
        f.path
        for f in gitdiff.changed_files(repo, base, head)
        if f.status != FileStatus.DELETED and f.path.endswith(".py") and _is_test_file(f.path, roots)
    }


def _is_test_file(path: str, roots: list[str]) -> bool:
    prefixes = tuple(r.rstrip("/") + "/" for r in roots if r.strip("/"))
    if prefixes:
        return path.startswith(prefixes)
    name = PurePosixPath(path).name
    return name.startswith("test_") or name.endswith("_test.py")  # pytest's default python_files


def coverage_breadth(cmap: CoverageMap | None) -> dict[str, int]:
    """Test id → how many lines its recorded coverage holds (none: no map)."""
    if cmap is None:
        return {}
    counts = [0] * len(cmap.tests)
    for lines in cmap.files.values():
        for indexes in lines.values():
            for i in indexes:
                counts[i] += 1
    return dict(zip(cmap.tests, counts, strict=True))


def failure_first(
    selection: Selection,
    changed_files: set[str],
    recently_failed: set[str],
    breadth: dict[str, int] | None = None,
    covering: set[str] | None = None,
) -> list[str]:
    """The ids to run first, in order: an order file for the plugin. With the whole suite selected,
    the changed test files and recent failures, then the tests of the coverage map that ran the
    changed lines (``covering``); the rest after them."""
    first = sorted(recently_failed) + sorted(changed_files - recently_failed)
    known = breadth or {}
    if selection.whole_suite:
        middle = [t for t in known if t in (covering or set())]
    else:
        middle = [t.nodeid for t in selection.tests if not _only_always_run(t.reasons)]
    # stable: the selection's (or the map's) order among equals
    middle.sort(key=lambda n: known.get(n, 1 << 62))
    last = [t.nodeid for t in selection.tests if _only_always_run(t.reasons)]
    return list(dict.fromkeys([*first, *middle, *last]))


def covering_tests(cmap: CoverageMap | None, lines: dict[str, set[int]]) -> set[str]:
    """The map's tests that ran any of the changed lines (an ordering hint: the map may be of an
    older commit, and ordering never changes which tests run)."""
    if cmap is None:
        return set()
    return {t for path, numbers in lines.items() for t in cmap.tests_at(path, numbers)}


def _only_always_run(reasons: list[str]) -> bool:
    return bool(reasons) and all(r.startswith(ALWAYS_RUN_REASON) for r in reasons)
