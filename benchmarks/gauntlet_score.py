"""Scoring for `benchmarks/gauntlet.py`: paritybot's verdict on a pull request beside the truth.

Plain functions on the JSON the gauntlet stores, so a stored run can be scored again
(``--from-json``) without running anything.

The truth of a commit is its whole suite, as ``pytest`` with no arguments collects it in the
project's own configuration: ``{"tests": {nodeid: {"outcome", "duration"}}, "rerun": {...}}``,
outcomes ``passed``, ``failed``, ``error``, ``skipped``, ``xfailed``, ``collect-error`` (the id is
then the module's path). ``rerun`` holds the second outcome of the tests that failed at head but
not at base; one that passes the second time is flaky and is left out of the scoring.

The verdict is what ``paritybot check --json`` printed (its ``RunReport``), or why it printed none.
"""

from __future__ import annotations

import ast
import re
import statistics
from typing import Any

FAILING = frozenset({"failed", "error", "collect-error"})
REPORTED_FAILING = frozenset({"failed", "error"})  # paritybot's "flaky" passed on a rerun


def failing(truth: dict[str, Any]) -> set[str]:
    return {nodeid for nodeid, t in truth["tests"].items() if t["outcome"] in FAILING}


def flaky(truth: dict[str, Any]) -> set[str]:
    return {nodeid for nodeid, outcome in truth.get("rerun", {}).items() if outcome not in FAILING}


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", re.MULTILINE)


def changed_lines(diff: str) -> set[int]:
    """Head-side line numbers a ``git diff -U0`` of one file touches (a deletion: the line after it)."""
    lines: set[int] = set()
    for match in HUNK.finditer(diff):
        start, count = int(match.group(1)), int(match.group(2) or "1")
        lines.update(range(start, start + count) if count else (start, start + 1))
    return lines


def touched_definitions(source: str, lines: set[int]) -> list[str]:
    """Dotted names (``Class.method``, ``func``) of the functions and classes whose own lines,
    decorators included, the change touches; a class only when a line outside its methods is."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    touched: list[str] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                span = set(range(first, (child.end_lineno or child.lineno) + 1))
                inner = {
                    n
                    for sub in child.body
                    if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                    for n in range(sub.lineno, (sub.end_lineno or sub.lineno) + 1)
                }
                own = span - inner if isinstance(child, ast.ClassDef) else span
                if own & lines:
                    touched.append(prefix + child.name)
                visit(child, f"{prefix}{child.name}.")

    visit(tree, "")
    return touched


def _item_names(nodeid: str) -> list[str]:
    """The dotted names an item may be defined under: ``Class.test`` and ``Class`` for a test in
    a class, and each tail of a doctest's ``pkg.mod.Class.method`` (its module prefix is not
    known here)."""
    parts = [p.split("[", 1)[0] for p in nodeid.split("::")[1:]]
    pieces = ".".join(parts).split(".")
    enclosing = (
        parts[:1] if len(parts) > 1 else []
    )  # a test class: a change to its own lines reaches each test
    return [*enclosing, *(".".join(pieces[i:]) for i in range(len(pieces)))]


def required_tests(truth: dict[str, Any], touched: dict[str, list[str]]) -> set[str]:
    """The items at head whose own definition the change touches: an edited or added test, the
    doctest of an edited function. A test reached only through a helper the change edits is not
    counted here (whether that reaches it is what the selection decides)."""
    required = set()
    for nodeid in truth["tests"]:
        names = touched.get(_file_of(nodeid))
        if names and set(_item_names(nodeid)) & set(names):
            required.add(nodeid)
    return required


def _listed_with_reason(tests: dict[str, Any]) -> set[str]:
    """Ids and module paths the report names as not run, with its reason beside them."""
    selection = tests.get("selection") or {}
    named = [
        *tests.get("not_found", []),
        *(e["path"] for e in tests.get("not_collected", [])),
        *selection.get("budget_dropped", []),
        *selection.get("removed", []),
    ]
    return set(named)


def score_pr(
    pr: dict[str, Any], base: dict[str, Any], head: dict[str, Any], report: dict[str, Any] | None
) -> dict[str, Any]:
    """One pull request's figures; see docs/test-selection.md for the definitions."""
    base_failing, head_failing = failing(base), failing(head)
    unsure = flaky(head)
    new_failures = sorted(head_failing - base_failing - unsure)
    fixed = sorted(base_failing - head_failing)
    tests = (report or {}).get("tests") or {}
    results = tests.get("results", [])
    ran = {r["nodeid"] for r in results}
    reported = {r["nodeid"] for r in results if r["outcome"] in REPORTED_FAILING}
    collect_errors = {e["path"] for e in tests.get("not_collected", [])}
    status = tests.get("status") or ("run error" if report is None or report.get("error") else "no tests")
    red = status in ("failed", "error") or report is None or bool(report.get("error"))

    contradicted = sorted((reported - head_failing) | (collect_errors - {_file_of(f) for f in head_failing}))
    confirmed = sorted(reported & head_failing)
    false_red = red and (bool(contradicted) or not confirmed)
    # True, but not the change's doing: every failure it reports fails at base too.
    red_on_base_failures = red and not false_red and set(confirmed) <= base_failing

    required = required_tests(head, pr.get("touched", {})) - unsure
    listed = _listed_with_reason(tests)
    dropped = sorted(t for t in required - ran if t not in listed and _file_of(t) not in listed)

    missed = sorted(t for t in new_failures if t not in ran and t not in listed and t not in reported)

    durations = {nodeid: t["duration"] for nodeid, t in head["tests"].items()}
    total = sum(durations.values())
    selected_time = sum(durations.get(nodeid, 0.0) for nodeid in ran)
    selection = tests.get("selection") or {}
    return {
        "status": status,
        "red": red,
        "false_red": false_red,
        "red_on_base_failures": red_on_base_failures,
        "contradicted": contradicted,
        "confirmed_failures": confirmed,
        "run_error": (report or {}).get("error") or ("" if report else pr.get("check_error", "no report")),
        "new_failures_at_head": new_failures,
        "fixed_by_pr": fixed,
        "pre_existing_failures": len(base_failing & head_failing),
        "flaky_excluded": sorted(unsure),
        "required": len(required),
        "silent_drops": dropped,
        "head_failures_not_selected": missed,
        "ran": len(ran),
        "suite_size": len(head["tests"]),
        "share_of_suite_time": (selected_time / total) if total else 0.0,
        "map_use": selection.get("map_use", ""),
        "whole_suite": selection.get("whole_suite", False),
        "notes": selection.get("notes", []),
        "message": tests.get("message", ""),
    }


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    shares = [r["score"]["share_of_suite_time"] for r in rows]
    return {
        "prs": len(rows),
        "false_reds": sum(1 for r in rows if r["score"]["false_red"]),
        "red_on_base_failures": sum(1 for r in rows if r["score"].get("red_on_base_failures")),
        "silent_drops": sum(1 for r in rows if r["score"]["silent_drops"]),
        "silent_drop_tests": sum(len(r["score"]["silent_drops"]) for r in rows),
        "head_failures_not_selected": sum(len(r["score"]["head_failures_not_selected"]) for r in rows),
        "head_failures": sum(len(r["score"]["new_failures_at_head"]) for r in rows),
        "median_share": statistics.median(shares) if shares else 0.0,
    }


def render(rows: list[dict[str, Any]], title: str) -> str:
    """The two markdown tables: per project and in total, then per pull request."""
    projects = sorted({r["project"] for r in rows})
    lines = [
        f"#### {title}",
        "",
        "| project | PRs | false reds | red, failures the base has too | silent drops (tests) "
        "| head failures not selected (of) | median share of suite time |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in [*projects, "total"]:
        group = rows if name == "total" else [r for r in rows if r["project"] == name]
        s = summarise(group)
        label = "**total**" if name == "total" else name
        lines.append(
            f"| {label} | {s['prs']} | {s['false_reds']} | {s['red_on_base_failures']} | "
            f"{s['silent_drops']} ({s['silent_drop_tests']}) | "
            f"{s['head_failures_not_selected']} (of {s['head_failures']}) | {s['median_share']:.1%} |"
        )
    lines += [
        "",
        "| project | PR | truth: fail at head, not base / fixed / failing at both | paritybot: tests | ran | map | share | false red | silent drops | head failures not selected |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r["score"]
        lines.append(
            f"| {r['project']} | {r['pr']} `{r['head'][:8]}` | {len(s['new_failures_at_head'])} / "
            f"{len(s['fixed_by_pr'])} / {s['pre_existing_failures']} | {s['status']} | "
            f"{s['ran']} of {s['suite_size']} | {s['map_use'] or '—'} | {s['share_of_suite_time']:.1%} | "
            f"{'**yes**' if s['false_red'] else 'no'} | {len(s['silent_drops']) or 'none'} | "
            f"{len(s['head_failures_not_selected']) or 'none'} |"
        )
    return "\n".join(lines)
