"""One run, start to finish: workspace → probe → pre-commit → docstrings → select → test → benchmarks → report.

The pipeline knows the order of the steps and what each needs; the checks themselves live in
their own modules. Everything it touches from outside (the runner backend, the clock, cached
coverage maps, cancellation) is passed in, so the same code serves `serve`, `check` and the tests.
It is longer than most modules because it wires every step; what a step decides lives with the
step (e.g. whose failure it is: runner/checks/attribution.py; the order: ordering.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import structlog

from bot.core.collect_env import parse_pr_body
from bot.core.config import Environment, RepoConfig
from bot.core.kinds import COMMAND
from bot.core.models import (
    CheckStatus,
    DocstringResult,
    EnvFacts,
    HookStatus,
    PrecommitResult,
    RunKind,
    RunReport,
    RunRequest,
    RunScope,
    RunState,
    SelectedTest,
    Selection,
    TestCaseResult,
    TestOutcome,
    TestsResult,
)
from bot.core.perf import PerformanceResult, PerfThresholds, Verdict, perf_trigger
from bot.core.verdict import fails_the_change
from runner.backends.base import (
    ProcessLedger,
    ReadsRunningStep,
    Runner,
    RunnerError,
    RunnerFactory,
    RunnerRequest,
    RunRefused,
    Step,
)
from runner.checks.attribution import (
    FAILING,
    BaseOutcomes,
    TestHistory,
    attribute,
    from_record,
    merged,
    recorded,
    recording,
    run_on_base,
)
from runner.checks.docstrings import check_docstrings
from runner.checks.moved_tests import find_moved
from runner.checks.ordering import (
    changed_test_files,
    coverage_breadth,
    covering_tests,
    failure_first,
)
from runner.checks.precommit import run_precommit
from runner.checks.pytest_plugins import plugin_hint
from runner.checks.repro import ReproContext
from runner.checks.rfc import RfcInputs, collect_rfc_inputs, evaluate_rfc
from runner.checks.streaming import MAX_BYTES as LIVE_MAX_BYTES
from runner.checks.streaming import MIN_INTERVAL_S, POLL_S, ContainerTail, LiveTail
from runner.checks.testexec import LIVE_PATH, TestRunError, run_tests
from runner.git import GitError
from runner.gitdiff import changed_lines, same_files
from runner.hints import setup_failure_hint
from runner.parity import build_parity, reference_from_config
from runner.perf.selection import select_benchmarks, where_looked, why_lines
from runner.perf.stats import compare_all
from runner.perf.step import (
    SIDES_DIR,
    PerfRunError,
    export_base,
    export_sides,
    parse_results,
    perf_step,
    plan_from_settings,
    selected_benchmarks,
)
from runner.probe.probe import parse_probe, probe_step
from runner.project_stack import project_stack
from runner.selection.coverage_map import (
    CoverageMap,
    CoverageMapError,
    CoverageMapStore,
    coverage_map_from_step,
    coverage_step,
)
from runner.selection.pr import nearest_map, nothing_selected, select_tests
from runner.step_log import LiveOutput, LoggedRunner, StepLogSink, log_docstrings
from runner.workspace import Workspace, WorkspaceError, prepare_workspace, remove_workspace

log = structlog.get_logger(__name__)


@dataclass
class PipelineDeps:
    runner_factory: RunnerFactory
    workspace_root: Path
    cache_root: Path
    token: str | None = None
    baseline: EnvFacts | None = None  # the CI reference probe recorded on the default branch
    keep_workspace: bool = False
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    coverage_dir: Path | None = None  # where coverage maps live; default: under cache_root
    attempt: int = 1
    """Which try of the run this is: each gets a workspace of its own, so a retry never works in
    (or deletes) the directory a dead attempt's leftover processes may still use."""
    progress: Callable[[RunReport], Awaitable[None]] | None = None
    """Told the report so far each time a check's result is known (pre-commit, docstrings), so its
    check run can complete before the tests end. It gets a copy; its failure never stops the run."""
    processes: ProcessLedger | None = None
    """Where the host runner records the process group of each step."""
    history: TestHistory | None = None
    """Other runs' test outcomes (the service's store): known flaky tests, the default branch's record."""
    step_log: StepLogSink | None = None
    """Where each step's start, whole output and end go as they happen (the run page's log)."""
    precommit_home: Path | None = None
    """A local run's own pre-commit cache (the contributor's PRE_COMMIT_HOME), used on the host instead
    of the run's store: hooks installed there need no network. Never set by the service."""


class Cancelled(Exception):
    pass


class Pipeline:
    """Runs one request in one environment. ``cancel()`` may be called from another task."""

    def __init__(
        self,
        request: RunRequest,
        config: RepoConfig,
        environment: Environment,
        run_id: str,
        deps: PipelineDeps,
    ):
        self.request = request
        self.config = config
        self.environment = environment
        self.run_id = run_id
        self.deps = deps
        self._runner: Runner | None = None
        self._cancelled = asyncio.Event()
        self._perf: PerformanceResult | None = None  # set when this run compares benchmarks
        self._base_root: str | None = None  # the merge base's tree in the workspace, for attribution
        self._base_note = ""  # why failures cannot be run on the base, when they cannot

    async def cancel(self) -> None:
        self._cancelled.set()
        if self._runner is not None:
            await self._runner.cancel()

    def _check_cancelled(self) -> None:
        if self._cancelled.is_set():
            raise Cancelled()

    async def execute(self) -> RunReport:
        req = self.request
        report = RunReport(
            run_id=self.run_id,
            repo=req.repo,
            pr_number=req.pr_number,
            head_sha=req.head_sha,
            environment=self.environment.name,
            started_at=self.deps.clock(),
        )
        workspace: Workspace | None = None
        try:
            workspace = await prepare_workspace(
                clone_url=req.clone_url,
                repo=req.repo,
                head_sha=req.head_sha,
                base_ref=req.base_ref,
                base_sha=None if req.base_ref else req.base_sha,
                run_id=self.run_id,
                attempt=self.deps.attempt,
                workspace_root=self.deps.workspace_root,
                cache_root=self.deps.cache_root,
                token=self.deps.token,
            )
            report.base_sha = workspace.base_sha or req.base_sha
            report.nothing_to_check = await asyncio.to_thread(self._nothing_to_check, workspace)
            if report.nothing_to_check:
                report.state = RunState.SUCCEEDED
                return report  # nothing runs: no runner is even started
            if req.kind == RunKind.PULL_REQUEST:
                # Before the first step: a container gets its copy of the workspace then.
                await asyncio.to_thread(self._prepare_performance, workspace)
                await asyncio.to_thread(self._prepare_attribution, workspace)
            self._check_cancelled()
            sink = self.deps.step_log
            live = LiveOutput(sink) if sink is not None else None
            self._runner = await self.deps.runner_factory(
                RunnerRequest(
                    self.environment,
                    self.run_id,
                    trusted_code=req.code_trusted,
                    redact=(self.deps.token,) if self.deps.token else (),
                    processes=self.deps.processes,
                    output=live,
                )
            )
            if sink is not None and live is not None:
                self._runner = LoggedRunner(self._runner, sink, live)
            await self._runner.prepare()
            info = self._runner.info
            report.runner, report.runner_reason = info.kind, info.reason
            report.image, report.image_digest, report.image_ref = (
                info.image,
                info.image_digest,
                info.image_ref,
            )
            limit_s = self.environment.timeout_minutes * 60
            try:
                async with asyncio.timeout(limit_s):
                    if req.kind == RunKind.BASELINE:
                        await self._baseline(report, workspace)
                    else:
                        await self._checks(report, workspace)
            except TimeoutError:
                await self._runner.cancel()  # the container or process of the step in progress
                raise RunnerError(
                    f"the run took longer than the environment's timeout_minutes ({limit_s / 60:g} min) "
                    "and was stopped; the results so far are shown"
                ) from None
            report.state = RunState.SUCCEEDED
        except Cancelled:
            report.state = RunState.CANCELLED
        except (WorkspaceError, RunnerError) as exc:
            report.state, report.error = RunState.FAILED, str(exc)
            report.refused = isinstance(exc, RunRefused)
        except Exception as exc:
            log.exception("run crashed")
            report.state, report.error = RunState.FAILED, f"internal error: {type(exc).__name__}: {exc}"
        finally:
            if self._cancelled.is_set():
                report.state = RunState.CANCELLED
            if self._runner is not None:
                await self._runner.close()
            if workspace is not None and not self.deps.keep_workspace:
                remove_workspace(workspace)
            report.finished_at = self.deps.clock()
        return report

    # --- the PR checks ---------------------------------------------------------------------------

    def _nothing_to_check(self, ws: Workspace) -> str | None:
        """Why the pull request's change is empty, if it is: its head has its merge base's files.

        Checking it would compare the base with itself, and a pass would say something untrue.
        An explicit request for the whole suite or for the failed tests still runs.
        """
        req = self.request
        if req.kind != RunKind.PULL_REQUEST or req.scope != RunScope.SELECTED or ws.base_sha is None:
            return None
        if not same_files(ws.path, ws.base_sha, ws.head_sha):
            return None
        head = f"`{ws.head_sha[:12]}`"
        if ws.base_sha == ws.head_sha:
            return f"the change is empty: its head {head} is already part of the base"
        return (
            f"the change is empty: its head {head} has the same files as `{ws.base_sha[:12]}`, "
            "where it leaves the base"
        )

    async def _checks(self, report: RunReport, ws: Workspace) -> None:
        # The docstrings, the RFC inputs and the test selection read git's objects only, never the
        # working tree the steps use (and pre-commit's hooks may rewrite): they are worked out
        # while the probe and pre-commit run.
        analysis = asyncio.ensure_future(asyncio.to_thread(self._analyse, ws))
        try:
            await self._steps_before_tests(report, ws)
            docstrings, rfc_inputs, selection = await analysis
        finally:
            analysis.cancel()  # when a step was cancelled or failed; a no-op once it is done
        cfg = self.config
        report.docstrings = docstrings
        if (
            self.deps.step_log is not None
            and docstrings is not None
            and docstrings.status != CheckStatus.DISABLED
        ):
            log_docstrings(self.deps.step_log, docstrings)
        await self._progress(report)  # pre-commit and the docstrings are known: their runs complete
        if rfc_inputs is not None:
            changed, api_changes, new_deps = rfc_inputs
            report.rfc = evaluate_rfc(
                cfg.rfc, changed, self.request.labels, self.request.pr_body, api_changes, new_deps
            )
        self._check_cancelled()
        report.tests = (
            await self._tests(report, ws, selection)
            if selection is not None
            else TestsResult(status=CheckStatus.DISABLED)
        )
        if self._perf is not None:
            report.performance = await self._performance(self._perf, report, ws)
        self._check_cancelled()
        report.parity = build_parity(
            self._reference(),
            report.probe,
            parse_pr_body(self.request.pr_body) if self.request.pr_body else None,
            cfg.parity.packages,
            await asyncio.to_thread(project_stack, ws.path, ws.head_sha),
        )

    def _analyse(self, ws: Workspace) -> tuple[DocstringResult | None, RfcInputs | None, Selection | None]:
        """What the bot works out from git's objects: docstrings, the RFC inputs, the selection."""
        cfg, base = self.config, ws.base_sha
        docstrings = None
        if cfg.checks.docstrings and base:
            docstrings = check_docstrings(ws.path, base, ws.head_sha, cfg.docstrings)
        elif not cfg.checks.docstrings:
            docstrings = DocstringResult(status=CheckStatus.DISABLED)
        rfc_inputs = collect_rfc_inputs(ws.path, base, ws.head_sha) if base else None
        return docstrings, rfc_inputs, self._select(ws) if cfg.checks.tests else None

    async def _steps_before_tests(self, report: RunReport, ws: Workspace) -> None:
        """The probe, then pre-commit."""
        assert self._runner is not None
        cfg, env = self.config, self.environment
        step_timeout = env.step_timeout_minutes * 60
        report.probe = await self._probe(ws)
        self._check_cancelled()
        base = ws.base_sha
        if cfg.checks.precommit and base:
            report.precommit = await run_precommit(
                self._runner,
                ws.path,
                base,
                ws.head_sha,
                env.name,
                step_timeout,
                install_network=env.network.precommit_install,
                hook_network=env.network.precommit,
                config_file=cfg.precommit.config,
                # A path of this machine: only a step run on it can use it.
                home=self.deps.precommit_home if self._runner.info.kind == "host" else None,
            )
            if env.network.precommit and any(h.status != HookStatus.SKIPPED for h in report.precommit.hooks):
                report.networked_steps.append("pre-commit hooks")
            await self._progress(report)
        elif cfg.checks.precommit:
            report.precommit = PrecommitResult(
                status=CheckStatus.ERROR, message="no base commit to diff against"
            )
        else:
            report.precommit = PrecommitResult(status=CheckStatus.DISABLED)
        self._check_cancelled()

    async def _progress(self, report: RunReport) -> None:
        if self.deps.progress is None:
            return
        try:
            await self.deps.progress(report.model_copy(deep=True))
        except Exception:
            log.exception("reporting progress failed; the run goes on")

    # --- performance: base against head, interleaved (docs/performance.md) -------------------------

    def _prepare_performance(self, ws: Workspace) -> None:
        """Decide whether this run compares benchmarks; if so, lay the two sides out in the workspace."""
        settings, req = self.config.performance, self.request
        trigger = perf_trigger(settings, self.environment.name, req.labels, req.perf)
        if trigger is None:
            return
        self._perf = PerformanceResult(
            trigger=trigger[1],
            threshold=settings.threshold,
            confidence=settings.confidence,
            blocking=settings.blocking,
            selected=trigger[0] == "every-pr" and req.scope == RunScope.SELECTED,
            rerun=f"paritybot perf --base {ws.base_sha or req.base_ref or 'BASE'} --head {ws.head_sha}"
            + (" --affected" if trigger[0] == "every-pr" else ""),
        )
        if ws.base_sha is None:
            self._perf.error = "no base commit to compare with"
            return
        try:
            export_sides(ws.path, ws.base_sha, ws.head_sha)
        except (PerfRunError, GitError, OSError) as exc:
            self._perf.error = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__

    def _prepare_attribution(self, ws: Workspace) -> None:
        """Lay the merge base's tree out in the workspace, for running the failing tests there."""
        cfg = self.config
        if not (cfg.checks.tests and cfg.tests.attribute_on_base) or ws.base_sha is None:
            return
        try:
            self._base_root = export_base(ws.path, ws.base_sha)
        except (PerfRunError, GitError, OSError) as exc:
            first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            self._base_note = f"the failing tests cannot be run on the merge base: {first}"

    async def _attribute(
        self, ws: Workspace, results: list[TestCaseResult]
    ) -> tuple[list[TestCaseResult], str]:
        """The results with each failure's cause, measured on the merge base; and a note when
        that could not be measured (those failures stay new)."""
        assert self._runner is not None
        failing = [r.nodeid for r in results if r.outcome in (TestOutcome.FAILED, TestOutcome.ERROR)]
        if not failing or ws.base_sha is None or not self.config.tests.attribute_on_base:
            return results, ""
        history = self.deps.history
        base: BaseOutcomes | None = None
        moved = find_moved(ws.path, ws.base_sha, ws.head_sha, failing)
        record = await history.failing_at(ws.base_sha) if history is not None else None
        if record is not None:  # the default branch's run on the merge base itself: no rerun needed
            base = from_record(record, failing, moved)
            failing = [n for n in failing if n not in base.results]
        if failing and self._base_root is not None:
            ran = await run_on_base(
                self._runner,
                ws.path,
                ws.base_sha,
                self._base_root,
                failing,
                self.config.tests,
                timeout_s=self.environment.step_timeout_minutes * 60,
                network=self.environment.network.tests,
                env=dict(self.environment.env),
                moved=moved,
            )
            self._check_cancelled()
            base = ran if base is None else merged(base, ran)
        still = [
            n
            for n in failing
            if base is None or n not in base.results or base.results[n].outcome not in FAILING
        ]
        seen = await history.flaky_elsewhere(still) if history is not None and still else {}
        note = base.note if base is not None else self._base_note if failing else ""
        return attribute(results, base, seen), note

    async def _performance(
        self, result: PerformanceResult, report: RunReport, ws: Workspace
    ) -> PerformanceResult:
        """The comparison's verdicts; a run that produced none says why, in ``error``."""
        assert self._runner is not None
        if result.error is not None:
            return result
        names = None
        if result.selected:
            selection = await asyncio.to_thread(self._select_benchmarks, ws)
            names = selected_benchmarks(selection)
            result.why = why_lines(selection)
            if names == []:
                return result  # nothing the change can affect: an empty comparison, said so
        settings = self.config.performance
        plan = plan_from_settings(
            settings, base_root=f"{SIDES_DIR}/base", head_root=f"{SIDES_DIR}/head", names=names
        )
        step = perf_step(plan, timeout_s=self.environment.step_timeout_minutes * 60)
        try:
            driver = parse_results(await self._runner.run(step, ws.path))
        except PerfRunError as exc:
            self._check_cancelled()
            result.error = str(exc)
            return result
        self._check_cancelled()
        limits = PerfThresholds(threshold=settings.threshold, confidence=settings.confidence)
        result.comparisons = compare_all(driver, limits)
        regressed = {c.name for c in result.comparisons if c.verdict is Verdict.REGRESSION}
        result.charted = [b for b in driver.benchmarks if b.name in regressed][:3]
        result.problems = [
            *(f"{e.kind} on {e.side.value}: {e.message}" for e in driver.errors),
            *driver.warnings,
        ]
        if not result.comparisons and not driver.errors:
            result.problems.append(where_looked(self.config))
        return result

    async def _probe(self, ws: Workspace) -> EnvFacts:
        assert self._runner is not None
        step = probe_step(self.config.parity.packages)
        return parse_probe(await self._runner.run(step, ws.path))

    def _reference(self) -> EnvFacts | None:
        if self.config.parity.reference:
            return reference_from_config(self.config.parity.reference)
        return self.deps.baseline

    def _select(self, ws: Workspace) -> Selection:
        req = self.request
        if ws.base_sha is None and req.scope == RunScope.SELECTED:
            return Selection(whole_suite=True, whole_suite_reasons=["no base commit to compare with"])
        if req.scope == RunScope.ALL:
            return Selection(
                whole_suite=True, whole_suite_reasons=[f"`{COMMAND} all` asked for the whole suite"]
            )
        if req.scope == RunScope.FAILED:
            return Selection(
                tests=[SelectedTest(nodeid=n, reasons=["failed in the previous run"]) for n in req.only_tests]
            )
        assert ws.base_sha is not None
        maps = CoverageMapStore(self._coverage_dir()) if self.config.tests.use_coverage_map else None
        return select_tests(ws.path, ws.base_sha, ws.head_sha, self.config.tests, maps)

    def _select_benchmarks(self, ws: Workspace) -> Selection:
        assert ws.base_sha is not None  # a comparison without a base stopped before
        maps = CoverageMapStore(self._coverage_dir()) if self.config.tests.use_coverage_map else None
        return select_benchmarks(ws.path, ws.base_sha, ws.head_sha, self.config, maps)

    async def _tests(self, report: RunReport, ws: Workspace, selection: Selection) -> TestsResult:
        assert self._runner is not None
        if not selection.whole_suite and not selection.tests:
            return TestsResult(
                status=CheckStatus.PASSED, selection=selection, message=nothing_selected(selection)
            )
        setup = await self._setup(report, ws)
        if setup is not None:
            return TestsResult(status=CheckStatus.ERROR, selection=selection, message=setup)
        info = self._runner.info
        repro = ReproContext(
            head_sha=ws.head_sha,
            clone_url=self.request.clone_url,
            pr_number=self.request.pr_number,
            image_ref=info.image_ref,
            image_id=info.image_digest,
            gpus=info.gpus,
            env={**self.environment.env},
            pytest_args=list(self.config.tests.pytest_args),
            setup=[*info.build, *self.environment.setup],
            docker_options=["--shm-size", info.shm_size] if info.kind == "docker" and info.shm_size else [],
        )
        nodeids = None if selection.whole_suite else [t.nodeid for t in selection.tests]
        if self.environment.network.tests:
            report.networked_steps.append("tests")
        order = await self._failure_first(ws, selection)
        runner = self._runner.inner if isinstance(self._runner, LoggedRunner) else self._runner
        tail: LiveTail = (
            ContainerTail(ws.path / LIVE_PATH, fetch=lambda: runner.read_running(LIVE_PATH, LIVE_MAX_BYTES))
            if isinstance(runner, ReadsRunningStep)
            else LiveTail(ws.path / LIVE_PATH)
        )
        watcher = asyncio.ensure_future(self._stream_failures(report, selection, tail))
        try:
            run = await run_tests(
                self._runner,
                ws.path,
                nodeids,
                self.config.tests,
                repro,
                timeout_s=self.environment.step_timeout_minutes * 60,
                network=self.environment.network.tests,
                env=dict(self.environment.env),
                order=order,
            )
        except TestRunError as exc:
            self._check_cancelled()
            return TestsResult(
                status=CheckStatus.ERROR, selection=selection, message=exc.message, output=exc.output
            )
        finally:
            watcher.cancel()  # the final result replaces what it said
        self._check_cancelled()
        results, note = await self._attribute(ws, run.results)
        tests = TestsResult(
            status=CheckStatus.PASSED,
            selection=selection,
            results=results,
            pre_existing_fails=self.config.tests.pre_existing == "failure",
            attribution_note=note,
            selected=run.selected,
            deselected=run.deselected,
            not_found=run.not_found,
            not_collected=run.not_collected,
            collection_fix=run.collection_fix,
        )
        tests.status = CheckStatus.FAILED if fails_the_change(tests) else CheckStatus.PASSED
        return tests

    async def _stream_failures(self, report: RunReport, selection: Selection, tail: LiveTail) -> None:
        """While the tests run: the failures so far, as progress (runner/checks/streaming.py) —
        the first at once, then at most one update per MIN_INTERVAL_S; the final result replaces them."""
        if self.deps.progress is None:
            return
        loop = asyncio.get_running_loop()
        last, pending = -MIN_INTERVAL_S, False
        while True:
            await asyncio.sleep(POLL_S)
            pending = await asyncio.to_thread(tail.read) or pending
            if pending and loop.time() - last >= MIN_INTERVAL_S:
                pending, last = False, loop.time()
                so_far = TestsResult(
                    status=CheckStatus.FAILED,
                    selection=selection,
                    results=list(tail.failed),
                    in_progress=tail.progress(),
                )
                await self._progress(report.model_copy(update={"tests": so_far}))

    async def _failure_first(self, ws: Workspace, selection: Selection) -> list[str]:
        """The order the tests run in: most likely to fail first (runner/checks/ordering.py)."""
        recent = await self.deps.history.recently_failed() if self.deps.history is not None else set()
        if ws.base_sha is None:
            return failure_first(selection, set(), recent)
        base, head, roots = ws.base_sha, ws.head_sha, self.config.tests.paths
        changed = await asyncio.to_thread(changed_test_files, ws.path, base, head, roots)
        cmap = await asyncio.to_thread(self._base_map, ws.path, base)
        covering: set[str] = set()
        if cmap is not None and selection.whole_suite:
            lines = await asyncio.to_thread(changed_lines, ws.path, base, head, include_deletions=True)
            covering = covering_tests(cmap, lines)
        return failure_first(selection, changed, recent, coverage_breadth(cmap), covering=covering)

    def _base_map(self, repo: Path, base_sha: str) -> CoverageMap | None:
        if not self.config.tests.use_coverage_map:
            return None
        cmap, _ = nearest_map(repo, base_sha, CoverageMapStore(self._coverage_dir()))
        return cmap

    async def _setup(self, report: RunReport, ws: Workspace) -> str | None:
        """The environment's set-up commands (e.g. `pip install -e .`); a message when one fails.

        They run the pull request's code (its setup.py, its build backend), so they get the
        network only when the base branch's config asks for it, and the report says so.
        """
        assert self._runner is not None
        network = self.environment.network.setup
        if network and self.environment.setup:
            report.networked_steps.append("set-up")
        for i, command in enumerate(self.environment.setup):
            step = Step(
                name=f"setup-{i + 1}",
                argv=["sh", "-c", command],
                timeout_s=self.environment.step_timeout_minutes * 60,
                network=network,
                env=dict(self.environment.env),
            )
            result = await self._runner.run(step, ws.path)
            self._check_cancelled()
            if not result.ok:
                tail = "\n".join(result.output.strip().splitlines()[-15:])
                hint = setup_failure_hint(result.output, network=network)
                why = f"set-up command `{command}` failed ({result.describe_failure()}):\n{tail}"
                return f"{why}\n{hint}" if hint else why
        return None

    # --- the default branch: the CI reference and the coverage map ----------------------------------

    def _coverage_dir(self) -> Path:
        if self.deps.coverage_dir is not None:
            return self.deps.coverage_dir
        return self.deps.cache_root / "coverage" / self.request.repo.replace("/", "__")

    async def _baseline(self, report: RunReport, ws: Workspace) -> None:
        assert self._runner is not None
        report.probe = await self._probe(ws)
        if not self.config.tests.use_coverage_map:
            return
        error = await self._setup(report, ws)
        if error is not None:
            report.error = error
            return
        step = recording(coverage_step(self.config.tests, timeout_s=self.environment.timeout_minutes * 60))
        result = await self._runner.run(step, ws.path)
        self._check_cancelled()
        report.tests = recorded(result)  # which tests fail on this commit: answers "already failing"
        try:
            cmap = coverage_map_from_step(result, ws.head_sha)
        except CoverageMapError as exc:
            report.error = f"coverage map not built: {exc}"
            return
        report.coverage_map = (
            cmap.health.model_copy(update={"files": len(cmap.files)}) if cmap.health else None
        )
        if cmap.health is not None and not cmap.health.usable:
            # An empty map would pass for one that knows every test runs nothing: keep none.
            report.error = f"coverage map not recorded: no test ran ({cmap.health.describe()})" + plugin_hint(
                result.output
            )
            return
        if not cmap.source_files():
            # Tests ran, but none ran the project's code as this tree holds it: the same as empty.
            report.error = (
                "coverage map not recorded: no test ran a line of the project's source in the run's "
                "tree (the project's code was imported from elsewhere, or no test calls it)"
                + (f" ({cmap.health.describe()})" if cmap.health is not None else "")
            )
            return
        CoverageMapStore(self._coverage_dir()).save(ws.head_sha, cmap)
