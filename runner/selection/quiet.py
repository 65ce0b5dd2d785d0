"""Why a changed file selects no test: one sentence per file, so an empty selection is never silent.

"No tests selected" alone is the answer a user cannot check; naming, per file, what was looked at
(the coverage map, the import graph, where pytest collects) lets them see a drop for what it is.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from runner.gitdiff import FileStatus
from runner.selection.change import FileChange
from runner.selection.config_files import is_config_file
from runner.selection.context import Context
from runner.selection.import_graph import is_test_file
from runner.selection.neutral import docstrings_only
from runner.selection.triggers import is_doc


def why_no_test(ctx: Context, fc: FileChange, test_files: set[str]) -> str:
    """Why ``fc`` selected nothing, given the signals :func:`runner.selection.select` ran for it."""
    path = fc.path
    if is_doc(path):
        return "documentation, which no test reads"
    if is_config_file(path):
        return "only settings no test reads changed (other tools' sections, descriptive metadata)"
    if PurePosixPath(path).suffix != ".py":
        return f"no test, and no code a test runs, mentions `{PurePosixPath(path).name}`"
    if path in test_files or fc.base_path in test_files:
        if fc.status == FileStatus.DELETED or fc.head_text is None:
            return "a test file this PR removes: nothing left to run"
        return "edited outside its tests' code (comments, blank lines)"
    if is_test_file(path) and not ctx.layout.collects(path):
        return (
            f"named like a test file, but pytest does not collect it: it looks in {ctx.layout.where()} "
            "(set `testpaths` in the pytest configuration, or `tests.paths`, to include it)"
        )
    if fc.base_text is not None and fc.head_text is not None and docstrings_only(fc.base_text, fc.head_text):
        return (
            "only docstrings changed; pytest does not collect this module's doctests here "
            "(no `--doctest-modules` in its options)"
        )
    graph = "no test imports what it changes (static import graph), and no test file is named after it"
    if ctx.cmap is not None and ctx.cmap.knows(fc.base_path):
        commit = (ctx.cmap.commit or ctx.change.base)[:12]
        return f"no test ran its changed lines, or the functions around them, in the coverage map of {commit}"
    if ctx.cmap is not None:
        return f"the coverage map has no record of it, and {graph}"
    return graph
