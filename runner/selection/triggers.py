"""Changes that decide how the whole suite runs, and files no test reads."""

from __future__ import annotations

import fnmatch
from pathlib import PurePosixPath

from bot.core.config import TestSettings
from runner.selection.change import FileChange
from runner.selection.config_files import changed_sections, is_config_file

# Sources a coverage tracer cannot see into: a change there may affect any test.
COMPILED_SUFFIXES = {
    ".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".hxx",
    ".pyx", ".pxd", ".pxi", ".f", ".f90", ".rs", ".metal", ".cl",
}  # fmt: skip
# Files no test reads.
DOC_SUFFIXES = {".md", ".rst", ".adoc", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".ipynb", ".bib"}
DOC_DIRS = {"docs", "doc", ".github"}
DOC_NAMES = {"LICENSE", "LICENCE", "COPYING", "AUTHORS", "CHANGELOG", "NOTICE", "CODEOWNERS", ".gitignore"}


# --- Whole-suite triggers ----------------------------------------------------------------------------


def _glob(path: str, pattern: str) -> bool:
    if fnmatch.fnmatchcase(path, pattern):
        return True
    # ``**/x`` also means ``x`` at the root, as in .gitignore.
    return pattern.startswith("**/") and fnmatch.fnmatchcase(path, pattern[3:])


def whole_suite_reasons(changes: list[FileChange], settings: TestSettings) -> list[str]:
    """Why the whole suite must run, one line per file; empty when a targeted run is enough.

    A shared configuration file (``pyproject.toml``, ``setup.cfg``, ``tox.ini``) counts only for the
    sections that reach the tests (:mod:`runner.selection.config_files`).
    """
    reasons = []
    for change in changes:
        for path in dict.fromkeys([change.path, change.base_path]):
            pattern = next((g for g in settings.whole_suite_globs if _glob(path, g)), None)
            if pattern is not None and is_config_file(path):
                sections = changed_sections(path, change.base_text, change.head_text)
                if sections:
                    reasons.append(
                        f"`{path}` changed ({', '.join(sections)}), which decides how every test runs"
                    )
                break  # only other tools' sections changed: no test reads them
            if pattern is not None:
                reasons.append(f"`{path}` changed (matches `{pattern}` in tests.whole_suite_globs)")
                break
            if PurePosixPath(path).suffix.lower() in COMPILED_SUFFIXES:
                reasons.append(f"`{path}` changed: compiled code, which coverage cannot attribute to tests")
                break
    return reasons


def is_doc(path: str) -> bool:
    pure = PurePosixPath(path)
    return (
        pure.suffix.lower() in DOC_SUFFIXES
        or pure.stem.upper() in DOC_NAMES
        or pure.name in DOC_NAMES
        or (len(pure.parts) > 1 and pure.parts[0] in DOC_DIRS)
    )
