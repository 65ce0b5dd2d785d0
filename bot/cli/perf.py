"""`paritybot perf`: the pull request's performance comparison, on a local checkout, before pushing.

The base (the merge base with ``--base``) and the head are exported from git's objects side by
side into a temporary workspace, then compared exactly as a run does (``runner/perf``): the
benchmarks the base's config names (``performance:``), else the pytest-benchmark tests pytest
finds, in alternating rounds, on this machine or in the environment's image.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

from bot.cli.checkout import commit_of, coverage_dir, open_checkout
from bot.cli.local_check import load_local_config
from bot.core.config import ConfigError, PerformanceSettings, RepoConfig
from bot.core.models import Selection
from bot.core.perf import Comparison, DriverReport, PerfThresholds, Verdict, crashed_on_head, outcome
from bot.render.performance import performance_section
from runner import gitdiff
from runner.backends.base import RunnerError, RunnerFactory, RunnerRequest
from runner.git import GitError, export_commit
from runner.gitdiff import UnsafeFileError
from runner.perf.selection import select_benchmarks, where_looked
from runner.perf.stats import compare_all
from runner.perf.step import (
    SIDES,
    SIDES_DIR,
    PerfRunError,
    parse_results,
    perf_step,
    plan_from_settings,
    selected_benchmarks,
    why_selected,
)
from runner.selection.coverage_map import CoverageMapStore
from runner.selection.pr import nothing_selected


async def compare_local(
    repo: Path,
    base: str,
    head: str,
    runner_factory: RunnerFactory,
    config: RepoConfig,
    names: list[str] | None = None,
) -> tuple[DriverReport, PerformanceSettings]:
    settings = config.performance
    workspace = Path(tempfile.mkdtemp(prefix="paritybot-perf-"))
    try:
        for side, sha in zip(SIDES, (base, head), strict=True):
            export_commit(repo, sha, workspace / SIDES_DIR / side)
        plan = plan_from_settings(
            settings, base_root=f"{SIDES_DIR}/base", head_root=f"{SIDES_DIR}/head", names=names
        )
        request = RunnerRequest(
            environment=config.default_environment(),
            run_id=f"perf-{uuid.uuid4().hex[:12]}",
            trusted_code=True,
        )
        runner = await runner_factory(request)
        try:
            await runner.prepare()
            result = await runner.run(perf_step(plan), workspace)
        finally:
            await runner.close()
        return parse_results(result), settings
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


async def perf_main(
    repo: Path,
    base: str,
    head: str,
    runner_factory: RunnerFactory,
    *,
    affected: bool = False,
    config_file: Path | None = None,
    as_json: bool = False,
) -> int:
    """Print the Performance section; 1 when a benchmark got slower past the threshold or crashed on
    the head (the change broke it), 2 on bad input.

    The config is found as `check` finds it: ``config_file``, else the merge base's (a change must
    not choose its own thresholds), said on stderr. ``as_json``: the comparisons as JSON instead.

    With ``affected``, only the pytest benchmarks the change can affect run, chosen by the same
    selection as the tests (``runner.selection.pr.select_tests``: the nearest usable coverage map,
    else static signals),
    and each compared benchmark is listed with the selection's reasons.
    """
    repo = open_checkout(repo)
    base_commit, head_sha = commit_of(repo, base, "--base"), commit_of(repo, head, "--head")
    try:
        base_sha = gitdiff.merge_base(repo, base_commit, head_sha)
        config, source = load_local_config(repo, head_sha, config_file, base_commit)
        print(source, file=sys.stderr)
        selection = _selection(repo, base_sha, head_sha, config) if affected else None
        names = selected_benchmarks(selection) if selection is not None else None
        if selection is not None and names == []:
            why = nothing_selected(selection, "benchmark")
            if as_json:
                print(json.dumps(_json_doc(base_sha, head_sha, [], why=why, notes=selection.notes), indent=2))
                return 0
            print(f"No benchmark to compare: {why}.")
            for note in selection.notes:
                print(note)
            print(where_looked(config))
            return 0
        report, settings = await compare_local(repo, base_sha, head_sha, runner_factory, config, names)
    except (GitError, UnsafeFileError, ConfigError, RunnerError, PerfRunError) as exc:
        print(f"paritybot perf: {exc}", file=sys.stderr)
        return 2
    limits = PerfThresholds(threshold=settings.threshold, confidence=settings.confidence)
    comparisons = compare_all(report, limits)
    for problem in [*(f"{e.kind} on {e.side.value}: {e.message}" for e in report.errors), *report.warnings]:
        print(f"paritybot perf: {problem}", file=sys.stderr)
    regression = any(c.verdict is Verdict.REGRESSION for c in comparisons)
    crashed = crashed_on_head(comparisons)
    for c in crashed:
        print(f"paritybot perf: {c.name} crashed on head: {c.reason}", file=sys.stderr)
    if as_json:
        doc = _json_doc(base_sha, head_sha, comparisons, threshold=limits.threshold, selection=selection)
        doc["errors"] = [e.model_dump(mode="json") for e in report.errors]
        doc["regression"] = regression
        doc["crashed_on_head"] = [c.name for c in crashed]
        print(json.dumps(doc, indent=2))
        return 1 if regression or crashed else 0
    print(
        performance_section(
            comparisons, report.benchmarks, threshold=limits.threshold, confidence=limits.confidence
        )
    )
    if selection is not None:
        print("\nWhy these benchmarks:")
        for c in comparisons:
            reasons = (
                why_selected(c.name, selection)
                if c.kind == "pytest"
                else ["not a pytest benchmark: always run"]
            )
            print(f"- {c.name}: {'; '.join(reasons) or 'selected'}")
    if not comparisons and not report.errors:
        print(f"\nNo benchmark found. {where_looked(config)}")
    result = outcome(comparisons, threshold=limits.threshold, blocking=True)
    print(f"\n{result.title}")
    return 1 if result.conclusion == "failure" else 0


def _json_doc(
    base_sha: str,
    head_sha: str,
    comparisons: list[Comparison],
    *,
    threshold: float | None = None,
    selection: Selection | None = None,
    why: str | None = None,
    notes: list[str] | None = None,
) -> dict[str, object]:
    """What `perf --json` prints: the commits compared and each benchmark's verdict, with why it ran."""
    rows = []
    for c in comparisons:
        row = c.model_dump(mode="json")
        if selection is not None:
            row["why"] = why_selected(c.name, selection) if c.kind == "pytest" else ["not a pytest benchmark"]
        rows.append(row)
    return {
        "base": base_sha,
        "head": head_sha,
        "threshold": threshold,
        "comparisons": rows,
        "nothing_to_compare": why,
        "notes": notes or [],
    }


def _selection(repo: Path, base_sha: str, head_sha: str, config: RepoConfig) -> Selection:
    maps = CoverageMapStore(coverage_dir(repo)) if config.tests.use_coverage_map else None
    return select_benchmarks(repo, base_sha, head_sha, config, maps)
