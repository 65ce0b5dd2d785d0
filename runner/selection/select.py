"""Which tests a change can affect, and why.

Signals, strongest first; each adds a reason to every test it selects:

1. ``tests.always_run`` from the config;
2. tests the PR edits or adds;
3. the per-test line coverage map of the base commit: tests that executed a changed line, or,
   for changed code no test executed line by line, the function (or class) around it; lines that
   run only at import time (``def`` lines, module constants) go to the tests that run the code
   using them;
4. the static import graph, resolved to the names actually used, for code the map cannot know
   (new files, new functions, no map at all) and for removed names; for a package's
   ``__init__.py``, whose code run at import the map records with no test, every test module
   whose collection imports the package (:mod:`~runner.selection.importers`);
5. file names (``tests/test_ops.py`` ↔ ``ops.py``) where the map cannot help.

A change to conftest.py, packaging, CI files, ``tests.whole_suite_globs`` or compiled sources
selects the whole suite. A change that cannot alter behaviour (comments, docstrings, formatting
that leaves the syntax tree equal) selects nothing. ``tests.max_tests`` keeps the strongest
signals and lists what it cut.

The decision (:func:`select_for_change`) is a pure function of the change, the settings, the map
and a source reader; :mod:`runner.selection.pr` reads the pull request from git around it.

The signals share one set of hits (:mod:`runner.selection.hits`), ranked against each other
before the budget cuts across them; each lives in its own module: :mod:`~runner.selection.edited`
(edited tests and doctests), :mod:`~runner.selection.by_coverage` (the map),
:mod:`~runner.selection.static` (the import graph, file names, data files, ``always_run``).
:mod:`~runner.selection.triggers` says when the whole suite runs; :mod:`~runner.selection.universe`
which tests exist; :mod:`~runner.selection.change` what changed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath

import structlog

from bot.core.config import TestSettings
from bot.core.models import Selection
from runner.gitdiff import FileStatus
from runner.selection.by_coverage import coverage_signal
from runner.selection.change import ChangeSet, FileChange, SourceReader, read_change, source_reader
from runner.selection.config_files import is_config_file
from runner.selection.context import Context
from runner.selection.coverage_map import CoverageMap
from runner.selection.edited import doctests, edited_tests, own_doctests
from runner.selection.hits import Hits, Signal, apply_budget
from runner.selection.importers import is_package_init
from runner.selection.neutral import behaviour_neutral, code_unchanged, docstrings_only
from runner.selection.pytest_config import pytest_layout
from runner.selection.quiet import why_no_test
from runner.selection.static import always_run, data_file, name_match, package_importers, static_signal
from runner.selection.triggers import is_doc, whole_suite_reasons
from runner.selection.universe import Universe, discover_test_files, parse_collect_only, split_nodeid

log = structlog.get_logger(__name__)

# The names callers used when everything lived here.
__all__ = [
    "ChangeSet",
    "Drift",
    "FileChange",
    "Signal",
    "SourceReader",
    "neutral_files",
    "parse_collect_only",
    "read_change",
    "select_for_change",
    "source_reader",
    "split_nodeid",
    "whole_suite_reasons",
]


@dataclass
class Drift:
    """What the base branch changed between the coverage map's commit and the merge base.

    The map describes ``change.base``; the tests that change reaches are added to the selection,
    said to be for that reason, because the map may no longer know how they run.
    """

    change: ChangeSet
    cmap: CoverageMap


def neutral_files(changes: list[FileChange]) -> list[str]:
    """Changed Python files whose change cannot alter behaviour (see :mod:`runner.selection.neutral`)."""
    return [
        fc.path
        for fc in changes
        if fc.path.endswith(".py")
        and fc.base_text is not None
        and fc.head_text is not None
        and fc.base_path == fc.path
        and behaviour_neutral(fc.base_text, fc.head_text)
    ]


def select_for_change(
    change: ChangeSet,
    settings: TestSettings,
    read: SourceReader,
    coverage_map: CoverageMap | None = None,
    all_tests: list[str] | None = None,
    signals: frozenset[Signal] | None = None,
    drift: Drift | None = None,
) -> Selection:
    """Decide the tests for a change already read from git (see the module docstring).

    ``coverage_map`` must describe ``change.base``'s lines (:func:`runner.selection.pr.rebase_map`
    makes an older map do so); ``drift`` is what the base branch changed since the map's own
    commit. ``signals`` limits which signals may select (all by default); the benchmark uses it
    to measure each one alone.
    """
    total = len(all_tests) if all_tests is not None else None
    neutral = neutral_files(change.files)
    files = [fc for fc in change.files if fc.path not in neutral]
    whole = whole_suite_reasons(files, settings)
    if whole:
        return Selection(
            whole_suite=True, whole_suite_reasons=whole, total_tests=total, unchanged_behaviour=neutral
        )

    def read_at(sha: str) -> Callable[[list[str]], dict[str, str | None]]:
        return lambda paths: read(sha, paths)

    layout = pytest_layout(change.head_files, read_at(change.head))
    test_files = discover_test_files(change.head_files, settings, layout)
    base_layout = pytest_layout(change.base_files, read_at(change.base))
    base_tests = discover_test_files(change.base_files, settings, base_layout)
    at_base = Universe(None, base_tests, change.base_files, read_at(change.base))
    universe = Universe(all_tests, test_files, change.head_files, read_at(change.head), at_base)
    hits = Hits(signals)
    ctx = Context(change, settings, coverage_map, read, universe, hits, layout=layout)
    quiet: dict[str, str] = {}
    for fc in files:
        before = hits.total_weight()
        _select_for_file(ctx, fc, test_files)
        if hits.total_weight() == before:
            quiet[fc.path] = why_no_test(ctx, fc, test_files)
    always_run(ctx)
    if drift is not None and any(not is_doc(fc.path) for fc in files):
        # Only a change the map is asked about needs the map's blind spots covered.
        _drift(drift, ctx)
    selection = apply_budget(hits, settings, total)
    selection.unchanged_behaviour = neutral
    selection.no_tests_for = quiet
    gone = ctx.removed - {t.nodeid for t in selection.tests}
    # The tests gone at head that the merge base had: this PR renamed or removed them (the others
    # the base branch removed after the coverage map was recorded).
    selection.removed = sorted(n for n in gone if at_base.exists(n))
    return selection


def _drift(drift: Drift, pr: Context) -> None:
    """The tests the base branch's own change since the map reaches, labelled as such."""
    ctx = Context(drift.change, pr.settings, drift.cmap, pr.read, pr.universe, pr.hits)
    layout = pytest_layout(drift.change.head_files, lambda paths: pr.read(drift.change.head, paths))
    test_files = discover_test_files(drift.change.head_files, pr.settings, layout)
    since = (drift.cmap.commit or drift.change.base)[:12]
    neutral = set(neutral_files(drift.change.files))
    try:
        for fc in drift.change.files:
            if fc.path in neutral:
                continue
            pr.hits.relabel = (
                f"`{fc.path}` changed on the base branch since the coverage map ({since}) was recorded"
            )
            _select_for_file(ctx, fc, test_files)
    finally:
        pr.hits.relabel = None
    pr.removed.update(ctx.removed)


def _select_for_file(ctx: Context, fc: FileChange, test_files: set[str]) -> None:
    path = fc.path
    if (
        PurePosixPath(path).suffix != ".py"
        and ctx.layout.collects_doctests(path)
        and fc.status != FileStatus.DELETED
    ):
        # A text file pytest collects as a doctest (--doctest-glob): its own item.
        nodeid = f"{path}::{PurePosixPath(path).name}"
        ctx.add_tests([nodeid], Signal.EDITED, "a doctest file this PR changes")
    if is_doc(path) or is_config_file(path):
        return  # a configuration file that mattered ran the whole suite already
    if PurePosixPath(path).suffix != ".py":
        data_file(ctx, fc)
        return
    if path in test_files or fc.base_path in test_files:
        edited_tests(ctx, fc)
    elif fc.base_text is not None and fc.head_text is not None:
        doctests(ctx, fc)
        if docstrings_only(fc.base_text, fc.head_text):
            return  # only doctests changed: no code a test runs did
        if code_unchanged(fc.base_text, fc.head_text):
            # A docstring a program reads (help text) changed: the map has no lines for it, so the
            # tests of its users are found statically, with a map as without one.
            static_signal(ctx, fc, fallback=False)
            return
    own_doctests(ctx, fc)
    if is_package_init(path):
        # Lines run while a package is imported belong to every test that imports it, with a map
        # (it records them with no test) as without one (the graph follows names, not imports).
        package_importers(ctx, fc)
    known = ctx.cmap is not None and ctx.cmap.knows(fc.base_path) and fc.base_text is not None
    if known:
        coverage_signal(ctx, fc)
        if path not in test_files and ctx.cmap is not None and ctx.cmap.holes():
            # Test modules that did not collect when the map was recorded: the map cannot speak
            # for them, the static graph and the file names can.
            static_signal(ctx, fc, fallback=True, only=set(ctx.cmap.holes()))
            name_match(ctx, fc, only=set(ctx.cmap.holes()))
    else:
        static_signal(ctx, fc, fallback=ctx.cmap is not None)
        if path not in test_files:
            name_match(ctx, fc)
