"""`paritybot select-tests`: which tests a change can affect, and why, on a local checkout.

It prints the selection `paritybot check` and the App run: the same function, the same maps.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bot.cli.checkout import UsageError, commit_of, coverage_dir, open_checkout
from bot.cli.local_check import load_local_config
from bot.core.config import ConfigError
from bot.core.models import Selection
from runner import gitdiff
from runner.git import GitError
from runner.gitdiff import UnsafeFileError
from runner.selection.coverage_map import CoverageMapStore
from runner.selection.pr import nothing_selected, select_tests


def select_tests_main(
    repo: str, base: str, head: str | None, as_json: bool, config_file: Path | None = None
) -> int:
    """``paritybot select-tests``: print the selection and its reasons; 0 on success, 2 on bad input.

    The config is found as `check` finds it: ``config_file``, else the merge base's
    ``.github/paritybot.yml`` (a change must not choose its own selection rules); which one applied
    is said on stderr.
    """
    try:
        root = open_checkout(Path(repo))
        head = commit_of(root, head or "HEAD", "--head")
        base = commit_of(root, base, "--base")
    except UsageError as exc:
        print(f"paritybot: {exc}", file=sys.stderr)
        return 2
    try:
        base_sha = gitdiff.merge_base(root, base, head)
        config, source = load_local_config(root, head, config_file, base)
        print(source, file=sys.stderr)
        settings = config.tests
        maps = CoverageMapStore(coverage_dir(root)) if settings.use_coverage_map else None
        selection = select_tests(root, base_sha, head, settings, maps)
    except (GitError, UnsafeFileError, ConfigError) as exc:
        print(f"paritybot select-tests: {exc}", file=sys.stderr)
        return 2
    if as_json:
        doc = selection.model_dump(mode="json")
        doc["base"] = base_sha
        print(json.dumps(doc, indent=2))
    else:
        print(render_selection(selection))
    return 0


def render_selection(selection: Selection) -> str:
    """Plain text for a terminal: what runs, and why."""
    lines = [f"base {(selection.base_sha or '')[:12]}; signals: {selection.signals()}"]
    lines.extend(f"note: {n}" for n in selection.notes)
    if selection.removed:
        lines.append(f"not run, renamed or removed by this PR ({len(selection.removed)}):")
        lines.extend(f"  {n}" for n in selection.removed)
    if selection.whole_suite:
        lines.append("whole suite:")
        lines.extend(f"  - {r}" for r in selection.whole_suite_reasons)
        return "\n".join(lines)
    if not selection.tests:
        lines.append(nothing_selected(selection))
    elif selection.unchanged_behaviour:
        files = ", ".join(selection.unchanged_behaviour)
        lines.append(f"only comments, docstrings or formatting changed in {files}: no test selected for them")
    for test in selection.tests:
        lines.append(test.nodeid)
        lines.extend(f"    {r}" for r in test.reasons)
    if selection.budget_dropped:
        lines.append(f"cut by tests.max_tests ({len(selection.budget_dropped)}):")
        lines.extend(f"  {n}" for n in selection.budget_dropped)
    return "\n".join(lines)
