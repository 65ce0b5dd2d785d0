"""The models every layer speaks: environment facts, check results and the run report.

Nothing past the web handler passes raw dicts around; parsing produces these, deciding and
rendering consume them.

Longer than most modules: it is the vocabulary every layer imports; one place to look up a field.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from bot.core.config import RepoConfig
from bot.core.perf import PerformanceResult


class Model(BaseModel):
    """Base for our models: unknown keys are errors, so typos never pass silently."""

    model_config = ConfigDict(extra="forbid")


# --- Environment facts: what the probe sees, what a contributor pasted, what CI pins ---------------


class EnvFacts(Model):
    """One environment, normalised. ``None`` means *not known*, never *absent*.

    The probe (in the container or on the host), the contributor's pasted ``collect_env`` output
    and the config's pinned CI reference all become this model, so the parity table compares like
    with like.
    """

    source: str = Field(description="where these facts come from: probe, collect_env, config")
    torch: str | None = None
    torch_cuda: str | None = Field(None, description="CUDA version torch was built with")
    torch_hip: str | None = Field(None, description="HIP/ROCm version torch was built with")
    cuda_available: bool | None = None
    cuda_runtime: str | None = None
    cudnn: str | None = None
    nccl: str | None = None
    nvidia_driver: str | None = None
    gpu_models: list[str] | None = None
    python: str | None = None
    os: str | None = None
    libc: str | None = None
    gcc: str | None = None
    clang: str | None = None
    cmake: str | None = None
    platform: str | None = Field(None, description="Python platform string, e.g. Linux-...-x86_64")
    packages: dict[str, str] = Field(default_factory=dict, description="package name → version")
    missing: list[str] = Field(
        default_factory=list, description="fields the source did not report (a partial paste)"
    )
    notes: list[str] = Field(default_factory=list)


#: The facts an environment report can carry, in EnvFacts' order (what ``missing`` may list).
ENV_FACT_FIELDS: tuple[str, ...] = tuple(
    name for name in EnvFacts.model_fields if name not in ("source", "missing", "notes")
)


# --- Check results ---------------------------------------------------------------------------------


class CheckStatus(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    NOT_CONFIGURED = "not_configured"
    DISABLED = "disabled"
    ERROR = "error"  # the check itself could not run (timeout, crash, bad config)
    CANCELLED = "cancelled"


class Level(StrEnum):
    NOTICE = "notice"
    WARNING = "warning"
    FAILURE = "failure"


class Finding(Model):
    """A file-and-line finding; becomes a check-run annotation."""

    path: str
    line: int = Field(ge=1)
    end_line: int | None = None
    level: Level = Level.WARNING
    title: str = ""
    message: str


class HookStatus(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


class HookResult(Model):
    id: str
    name: str
    status: HookStatus
    files_modified: bool = False
    output: str = ""


class PrecommitResult(Model):
    status: CheckStatus
    hooks: list[HookResult] = Field(default_factory=list)
    fix_command: str | None = None
    diff: str = ""
    output: str = ""
    message: str = ""


class DocstringResult(Model):
    status: CheckStatus
    style: str | None = None
    findings: list[Finding] = Field(default_factory=list)
    checked: int = Field(0, description="how many changed public objects were checked")
    message: str = ""


class SelectedTest(Model):
    nodeid: str
    reasons: list[str]


class MapUse(StrEnum):
    """Which coverage map a selection used, and how."""

    NONE = "none"  # no map was found: static signals only
    EXACT = "exact"  # the map of the merge base
    OLDER = "older"  # the map of an ancestor; what the base branch changed since widens the selection
    NOT_USED = "not_used"  # a map was found but cannot be trusted for this change (``notes`` say why)


class Selection(Model):
    tests: list[SelectedTest] = Field(default_factory=list)
    whole_suite: bool = False
    whole_suite_reasons: list[str] = Field(default_factory=list)
    total_tests: int | None = Field(None, description="size of the whole suite, when known")
    budget_dropped: list[str] = Field(default_factory=list, description="cut by the budget")
    base_sha: str | None = Field(None, description="the merge base the PR's change is measured from")
    head_sha: str | None = None
    coverage_map: str | None = Field(None, description="the commit of the coverage map used")
    map_use: MapUse = MapUse.NONE
    removed: list[str] = Field(
        default_factory=list, description="tests the map selected that do not exist at head: never run"
    )
    unchanged_behaviour: list[str] = Field(
        default_factory=list,
        description="changed files whose change cannot alter behaviour (comments, docstrings, formatting)",
    )
    no_tests_for: dict[str, str] = Field(
        default_factory=dict, description="changed file → why it selects no test (a targeted selection)"
    )
    notes: list[str] = Field(default_factory=list, description="what the reader should know about it")

    def signals(self) -> str:
        """Which signals decided, in words."""
        if self.map_use == MapUse.EXACT:
            return f"coverage map of the merge base ({(self.coverage_map or '')[:12]}) + static analysis"
        if self.map_use == MapUse.OLDER:
            return (
                f"coverage map of {(self.coverage_map or '')[:12]}, an ancestor of the merge base, "
                "+ static analysis"
            )
        if self.map_use == MapUse.NOT_USED:
            return f"static analysis (the coverage map of {(self.coverage_map or '')[:12]} is not used; see the note)"
        return "static analysis (no coverage map found)"


class TestOutcome(StrEnum):
    __test__ = False  # not a pytest class
    PASSED = "passed"
    FAILED = "failed"
    FLAKY = "flaky"  # failed, then passed on a rerun
    ERROR = "error"
    SKIPPED = "skipped"


class FailureCause(StrEnum):
    """Whose failure a test's failure at the head is, as measured (docs/reporting.md)."""

    NEW = "new"  # passes on the merge base, or the base does not have it: this change broke it
    ON_BASE = "on-base"  # fails on the merge base with the same error: not caused by this change
    ON_BASE_DIFFERENTLY = "on-base-differently"  # fails on the base too, with another error
    KNOWN_FLAKY = "known-flaky"  # seen failing elsewhere (other changes, the default branch) and passing


class TestCaseResult(Model):
    __test__ = False
    nodeid: str
    outcome: TestOutcome
    duration_s: float = 0.0
    message: str = Field("", description="the first lines of the error")
    traceback: str = Field("", description="the whole traceback as pytest reported it (the run page)")
    attempts: int = 1
    repro: list[str] = Field(default_factory=list, description="shell commands that reproduce it")
    collection_error: bool = Field(
        False, description="a selected module (``nodeid`` is its path) that pytest could not collect"
    )
    line: int | None = Field(
        None,
        description=(
            "a line of the test's own file: its definition, from pytest's report; "
            "while the tests still run, the failure's last frame there"
        ),
    )
    cause: FailureCause | None = Field(
        None, description="a failing test's attribution; None: not attributed (no base to run it on)"
    )
    base_message: str = Field("", description="the error on the merge base, when it fails there too")
    seen_failing: list[str] = Field(
        default_factory=list, description="links to other runs where this test failed (known flaky)"
    )


class CollectionError(Model):
    path: str = Field(description="the test module (or directory) pytest could not collect")
    message: str = Field("", description="the last line of the error, e.g. ModuleNotFoundError: …")


class TestsProgress(Model):
    """How far a test step that is still running has got (its failures so far are the results)."""

    __test__ = False
    done: int = 0
    total: int | None = None


class TestsResult(Model):
    """The tests of one run. Every count is in pytest's test items: a selected class or function
    counts as the tests it holds, each parametrized case once."""

    __test__ = False
    status: CheckStatus
    selection: Selection = Field(default_factory=Selection)
    results: list[TestCaseResult] = Field(default_factory=list)
    message: str = ""
    output: str = ""
    selected: int | None = Field(None, description="test items pytest kept to run; None: pytest did not say")
    deselected: int | None = Field(
        None, description="test items of the suite left out: not affected, or by the project's -m/-k"
    )
    not_found: list[str] = Field(
        default_factory=list, description="selected ids no test of the head matches: renamed or removed"
    )
    not_collected: list[CollectionError] = Field(
        default_factory=list, description="test modules outside the selection that could not be collected"
    )
    collection_fix: str = Field(
        "", description="the likely fix when test modules did not collect (the project does not import)"
    )
    pre_existing_fails: bool = Field(
        False, description="tests.pre_existing: failure — failures this change did not cause fail it too"
    )
    attribution_note: str = Field("", description="why failures were not, or only partly, attributed")
    in_progress: TestsProgress | None = Field(
        None, description="set while the tests still run: the results are the failures so far"
    )

    def count(self, outcome: TestOutcome) -> int:
        return sum(1 for r in self.results if r.outcome == outcome)

    @property
    def collection_errors(self) -> list[TestCaseResult]:
        """The selected modules that did not collect: errors of the suite, not failing tests."""
        return [r for r in self.results if r.collection_error]


class CoverageMapHealth(Model):
    """What a coverage map can vouch for: how much of the suite ran while it was recorded."""

    tests_collected: int = 0
    tests_ran: int = 0
    files: int = Field(0, description="source files the map records lines of")
    collection_errors: list[CollectionError] = Field(default_factory=list)
    not_run: list[str] = Field(
        default_factory=list, description="test files whose collected tests did not run (a crash, -x)"
    )
    exit_code: int | None = None
    turned_off: list[str] = Field(
        default_factory=list, description="the project's pytest plugins turned off so the map records"
    )

    @property
    def usable(self) -> bool:
        return self.tests_ran > 0

    @property
    def holes(self) -> list[str]:
        """Test files the map knows nothing about, though they are part of the suite."""
        return sorted({e.path for e in self.collection_errors} | set(self.not_run))

    def describe(self) -> str:
        """One line: ``12 of 14 tests ran; 1 module did not collect: tests/test_cli.py (ImportError: …)``."""
        line = f"{self.tests_ran:,} of {self.tests_collected:,} collected tests ran"
        if self.collection_errors:
            shown = ", ".join(
                f"{e.path} ({e.message})" if e.message else e.path for e in self.collection_errors[:3]
            )
            more = f" and {len(self.collection_errors) - 3} more" if len(self.collection_errors) > 3 else ""
            count = len(self.collection_errors)
            line += f"; {count} module{'s' if count != 1 else ''} did not collect: {shown}{more}"
        if self.not_run:
            line += f"; tests of {len(self.not_run)} file(s) did not run: {', '.join(self.not_run[:3])}"
        if self.turned_off:
            line += f"; turned off: {', '.join(self.turned_off)}"
        return line


class ParityVerdict(StrEnum):
    MATCH = "match"
    DIFFERS = "differs"
    UNKNOWN = "unknown"


class ParityRow(Model):
    field: str
    label: str
    reference: str | None = None
    this_run: str | None = None
    contributor: str | None = None
    verdict: ParityVerdict
    """Compared between the CI reference and this run (and the contributor where pasted)."""
    contributor_verdict: ParityVerdict = ParityVerdict.UNKNOWN


class AdviceKind(StrEnum):
    """What a line of parity advice is about, so a renderer can pick lines without reading them."""

    PASTE = "paste"  # no environment was pasted: how to paste one
    BACKEND = "backend"  # the contributor ran another kind of build (CPU, ROCm, CUDA) than CI
    DIFFERENCE = "difference"  # one decisive field differs from CI's
    OTHER_DIFFERENCES = "other_differences"  # the rest of the fields that differ, in one line
    DRIFT = "drift"  # this run differs from the pinned CI reference
    NOTE = "note"  # advice stored before advice had kinds
    SCOPE = "scope"  # rows left out: the project does not use what they compare


class Advice(Model):
    kind: AdviceKind
    text: str


class ParityReport(Model):
    rows: list[ParityRow] = Field(default_factory=list)
    advice: list[Advice] = Field(default_factory=list)
    contributor_pasted: bool = False
    uses_torch: bool = Field(
        True, description="the project uses PyTorch, so a `torch.utils.collect_env` paste is worth asking for"
    )

    @field_validator("advice", mode="before")
    @classmethod
    def _plain_strings_of_older_reports(cls, value: Any) -> Any:
        """Reports stored before advice had kinds hold plain strings; they are kept, as notes."""
        if not isinstance(value, list):
            return value
        return [{"kind": AdviceKind.NOTE, "text": v} if isinstance(v, str) else v for v in value]


class RfcItem(Model):
    text: str
    done: bool = False


class RfcReport(Model):
    triggered: bool
    reasons: list[str] = Field(default_factory=list)
    items: list[RfcItem] = Field(default_factory=list)
    rfc_link: str | None = None

    @property
    def complete(self) -> bool:
        return all(item.done for item in self.items)


# --- The run ---------------------------------------------------------------------------------------


class RunState(StrEnum):
    """Job lifecycle: ``queued → running → succeeded | failed | cancelled``.

    A run stopped on request (a new push, the PR closed), whether it was waiting or running, is
    ``cancelled``: users and check runs see no difference between the two. A run whose worker died
    is requeued at the next start, or ``failed`` with the reason after ``max_attempts``. A job
    engine's own states (procrastinate's ``aborted`` for a running job stopped on request, say)
    map onto these.
    """

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class RunScope(StrEnum):
    SELECTED = "selected"  # the targeted selection
    FAILED = "failed"  # only the tests that failed last time
    ALL = "all"  # the whole suite


class RunKind(StrEnum):
    PULL_REQUEST = "pull_request"  # the checks of a PR head
    BASELINE = "baseline"  # the default branch: CI reference probe and per-test coverage map


class RunRequest(Model):
    """What a job asks the pipeline to do; stored as the job's payload."""

    kind: RunKind = RunKind.PULL_REQUEST
    installation_id: int | None = None
    repo: str = Field(description="owner/name")
    clone_url: str
    private: bool | None = Field(
        None, description="the repository is private; None: not known, and the run page treats it as private"
    )
    pr_number: int | None = None
    head_sha: str
    head_ref: str | None = None
    base_ref: str | None = None
    base_sha: str | None = None
    environment: str | None = Field(None, description="environment name; None = decided by config")
    scope: RunScope = RunScope.SELECTED
    only_tests: list[str] = Field(default_factory=list, description="node ids for scope=failed")
    perf: bool = Field(False, description="`/retest-gpu perf` asked for the benchmarks' comparison")
    pr_body: str = ""
    labels: list[str] = Field(default_factory=list)
    trigger: str = Field("", description="what caused the run, for the report")
    comment_id: int | None = Field(None, description="the /retest-gpu comment, for its reaction")
    config: RepoConfig | None = Field(None, description="the repo config read when the run was asked for")
    author_trusted: bool = Field(
        False,
        description="the PR's author is trusted by the config's rules; false when the run was "
        "allowed only by a maintainer's approval of the commit",
    )

    @property
    def code_trusted(self) -> bool:
        """Whether the code is the project's own: a trusted author's PR, or the default branch."""
        return self.kind == RunKind.BASELINE or self.author_trusted


class RunReport(Model):
    run_id: str
    repo: str
    pr_number: int | None = None
    head_sha: str
    base_sha: str | None = None
    environment: str = "default"
    image: str | None = None
    image_digest: str | None = None
    image_ref: str | None = Field(
        None, description="how repro commands name the image: repo@sha256:… or the image id"
    )
    runner: str = Field("", description="host or docker; empty when no runner was started")
    runner_reason: str = ""
    networked_steps: list[str] = Field(
        default_factory=list,
        description="steps that ran the pull request's code with network, as the base branch's config allowed",
    )
    state: RunState = RunState.RUNNING
    error: str | None = Field(None, description="why the run itself broke, if it did")
    refused: bool = Field(
        False, description="no runner was allowed to take the run (``error`` says why): a setting to fix"
    )
    nothing_to_check: str | None = Field(
        None, description="why the change has nothing to check (its head has its base's files); no check ran"
    )
    probe: EnvFacts | None = None
    precommit: PrecommitResult | None = None
    docstrings: DocstringResult | None = None
    tests: TestsResult | None = None
    parity: ParityReport | None = None
    rfc: RfcReport | None = None
    performance: PerformanceResult | None = None
    coverage_map: CoverageMapHealth | None = Field(
        None, description="a baseline run: the health of the coverage map it recorded"
    )
    started_at: datetime | None = None
    finished_at: datetime | None = None
