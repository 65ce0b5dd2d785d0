"""The test selection of one pull request, computed once, here, for `check`, `select-tests` and the App.

It is a function of three commits: the coverage map's, the merge base's and the head's.

- The change is the pull request's own: merge base → head. Only it is ever described as
  "changed by this PR".
- The map is the one of the merge base, or of its nearest first-parent ancestor that has a usable
  one (maps are recorded per push to the default branch, so a merge base often falls between
  two). An older map is *rebased*: its lines are moved to where they are at the merge base, and
  lines added since have no coverage data (the static graph speaks for them). What the base
  branch changed since the map's commit widens the selection, with that reason, because the map
  may no longer know how the tests it touched run. When the base branch changed something that
  decides how the whole suite runs (conftest.py, packaging, compiled code), the map is not used.
- The node ids are resolved at the head: a test the map names that the PR renamed or removed is
  dropped and listed, never run.
"""

from __future__ import annotations

import difflib
from pathlib import Path, PurePosixPath
from typing import Protocol

import structlog

from bot.core.config import TestSettings
from bot.core.models import MapUse, Selection
from runner import gitdiff
from runner.git import GitError, git
from runner.gitdiff import FileStatus
from runner.selection.coverage_map import CoverageMap
from runner.selection.select import (
    ChangeSet,
    Drift,
    Signal,
    SourceReader,
    neutral_files,
    read_change,
    select_for_change,
    source_reader,
    whole_suite_reasons,
)

log = structlog.get_logger(__name__)

# How far back from a PR's merge base to look for a coverage map (first-parent commits).
MAP_SEARCH_DEPTH = 200
# Files that change how CI is driven, not what a test executes: no reason to distrust a map.
_CI_DIRS = (".github/", ".ci/")


class MapSource(Protocol):
    """Where coverage maps are found by commit (:class:`~runner.selection.coverage_map.CoverageMapStore`)."""

    def load(self, commit: str) -> CoverageMap | None: ...


class GivenMap:
    """One map in hand (the benchmark, a map from a project's own CI): found at its own commit."""

    def __init__(self, cmap: CoverageMap) -> None:
        self.cmap = cmap

    def load(self, commit: str) -> CoverageMap | None:
        return self.cmap if self.cmap.commit == commit else None


def select_tests(
    repo: Path,
    base: str,
    head: str,
    settings: TestSettings,
    maps: MapSource | None = None,
    all_tests: list[str] | None = None,
    signals: frozenset[Signal] | None = None,
) -> Selection:
    """The tests a PR (``base``...``head``) can affect, each with the reasons it was chosen.

    ``maps`` is where coverage maps are looked up (none: static signals only); ``all_tests``
    the node ids collected at the head, when known.

    Raises:
        GitError: a revision is unknown or git failed.
    """
    repo = Path(repo)
    head_sha = gitdiff.merge_base(repo, head, head)  # the merge base of a commit with itself: its sha
    base_sha = gitdiff.merge_base(repo, base, head)
    read = source_reader(repo)
    change = read_change(repo, base_sha, head_sha, read)
    cmap, notes = nearest_map(repo, base_sha, maps) if maps is not None else (None, [])
    view, drift, use = None, None, MapUse.NONE
    if cmap is not None and cmap.commit in (None, base_sha):
        view, use = cmap, MapUse.EXACT
    elif cmap is not None and cmap.commit is not None:
        since = read_change(repo, cmap.commit, base_sha, read)
        distrust = _distrust(since, settings, read)
        if distrust:
            use = MapUse.NOT_USED
            notes.append(
                f"The coverage map of {cmap.commit[:12]} is not used: on the base branch since it was "
                f"recorded, {distrust}."
            )
        else:
            view, drift, use = rebase_map(cmap, since), Drift(change=since, cmap=cmap), MapUse.OLDER
            notes.append(
                f"The coverage map is of {cmap.commit[:12]}, {_distance(repo, cmap.commit, base_sha)} "
                "before the merge base: tests reached by what the base branch changed since are added."
            )
    if view is not None and view.holes() and view.health is not None:
        notes.append(
            f"The coverage map of {(view.commit or base_sha)[:12]} is partial ({view.health.describe()}): "
            "tests in those files are selected by the static signals."
        )
    selection = select_for_change(change, settings, read, view, all_tests, signals, drift)
    selection.base_sha, selection.head_sha = base_sha, head_sha
    selection.coverage_map = cmap.commit if cmap is not None else None
    selection.map_use = use
    selection.notes = notes + selection.notes
    log.info(
        "tests selected",
        base=base_sha[:12],
        head=head_sha[:12],
        coverage_map=(selection.coverage_map or "")[:12] or None,
        map_use=use.value,
        whole_suite=selection.whole_suite,
        selected=len(selection.tests),
        removed=len(selection.removed),
    )
    return selection


def nothing_selected(selection: Selection, what: str = "test") -> str:
    """Why no test (or benchmark: ``what``) runs, in one sentence."""
    text = f"no {what} can be affected by this change"
    if selection.unchanged_behaviour:
        files = ", ".join(selection.unchanged_behaviour[:5])
        more = " …" if len(selection.unchanged_behaviour) > 5 else ""
        text += f" ({files}{more}: only comments, docstrings or formatting changed)"
    why = [f"`{path}`: {reason}" for path, reason in list(selection.no_tests_for.items())[:5]]
    if len(selection.no_tests_for) > 5:
        why.append(f"and {len(selection.no_tests_for) - 5} more files")
    if why:
        text += ("; " if selection.unchanged_behaviour else ": ") + "; ".join(why)
    return text


def nearest_map(repo: Path, commit: str, maps: MapSource) -> tuple[CoverageMap | None, list[str]]:
    """The usable map of ``commit`` or of its nearest first-parent ancestor; notes on maps passed over."""
    try:
        history = git(repo, "rev-list", "--first-parent", f"--max-count={MAP_SEARCH_DEPTH}", commit).split()
    except GitError:
        history = [commit]
    notes: list[str] = []
    for sha in history:
        cmap = maps.load(sha)
        if cmap is None:
            continue
        if cmap.health is not None and not cmap.health.usable:
            notes.append(f"The coverage map of {sha[:12]} is not used: {cmap.health.describe()}.")
            continue
        if cmap.commit is None:
            cmap = cmap.model_copy(update={"commit": sha})
        return cmap, notes
    return None, notes


def _distrust(since: ChangeSet, settings: TestSettings, read: SourceReader) -> str | None:
    """Why a map cannot describe the merge base, given what changed since its commit."""
    neutral = set(neutral_files(since.files))
    files = [fc for fc in since.files if fc.path not in neutral and not fc.path.startswith(_CI_DIRS)]
    reasons = whole_suite_reasons(files, settings)
    if not reasons:
        return None
    return reasons[0] + (f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else "")


def _distance(repo: Path, older: str, newer: str) -> str:
    try:
        count = int(git(repo, "rev-list", "--count", f"{older}..{newer}"))
    except (GitError, ValueError):
        return "some commits"
    return f"{count} commit{'s' if count != 1 else ''}"


def rebase_map(cmap: CoverageMap, since: ChangeSet) -> CoverageMap:
    """The map with its lines moved to where they are at ``since.head``.

    A line the later commit added has no counterpart: it is listed in ``unmapped`` so the
    selection does not read "no test ran it" where the map simply never saw it.
    """
    files = dict(cmap.files)
    import_lines = dict(cmap.import_lines)
    imported_by = dict(cmap.imported_by)
    built_by = dict(cmap.built_by)
    fixture_lines = dict(cmap.fixture_lines)
    unmapped: dict[str, list[int]] = {}
    moves: dict[str, tuple[str, dict[int, int]] | None] = {}  # old path → new path and lines; None: gone
    for fc in since.files:
        old = fc.base_path
        if not old.endswith(".py") and PurePosixPath(fc.path).suffix != ".py":
            continue
        by_line, imports, importers = files.pop(old, {}), import_lines.pop(old, []), imported_by.pop(old, {})
        origins, fixtures = built_by.pop(old, {}), fixture_lines.pop(old, {})
        if fc.status == FileStatus.DELETED or fc.head_text is None or fc.base_text is None:
            moves[old] = None
            continue
        moved, added = _line_moves(fc.base_text, fc.head_text)
        moves[old] = (fc.path, moved)
        files[fc.path] = {moved[n]: ids for n, ids in by_line.items() if n in moved}
        import_lines[fc.path] = [moved[n] for n in imports if n in moved]
        imported_by[fc.path] = {moved[n]: t for n, t in importers.items() if n in moved}
        built_by[fc.path] = {moved[n]: o for n, o in origins.items() if n in moved}
        fixture_lines[fc.path] = {moved[n]: f for n, f in fixtures.items() if n in moved}
        unmapped[fc.path] = added
    return cmap.model_copy(
        update={
            "files": files,
            "import_lines": import_lines,
            "imported_by": imported_by,
            "built_by": _move_origins(built_by, moves),
            "fixture_lines": fixture_lines,
            "unmapped": unmapped,
        }
    )


def _move_origins(
    built_by: dict[str, dict[int, list[str]]], moves: dict[str, tuple[str, dict[int, int]] | None]
) -> dict[str, dict[int, list[str]]]:
    """Origins (``module:line``) moved with their modules' lines. A line one of whose origins is
    gone loses them all: the selection then attributes it as it would without origins."""
    out: dict[str, dict[int, list[str]]] = {}
    for path, by_line in built_by.items():
        kept: dict[int, list[str]] = {}
        for line, origins in by_line.items():
            new: list[str] = []
            for origin in origins:
                module, _, at = origin.rpartition(":")
                move = moves.get(module, (module, None))
                target = None if move is None or not at.isdigit() else move
                if target is None:
                    break
                lines = target[1]
                if lines is None:
                    new.append(origin)
                elif int(at) in lines:
                    new.append(f"{target[0]}:{lines[int(at)]}")
                else:
                    break
            else:
                kept[line] = new
        out[path] = kept
    return out


def _line_moves(old_text: str, new_text: str) -> tuple[dict[int, int], list[int]]:
    """Old line → new line for the lines both texts share, and the new lines with no old one."""
    old, new = old_text.splitlines(), new_text.splitlines()
    moved: dict[int, int] = {}
    kept: set[int] = set()
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, _ in matcher.get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                moved[i1 + k + 1] = j1 + k + 1
                kept.add(j1 + k + 1)
    return moved, [n for n in range(1, len(new) + 1) if n not in kept]
