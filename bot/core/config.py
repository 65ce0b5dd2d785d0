"""The repository's own configuration, ``.github/paritybot.yml``, as pydantic models.

Every field has a default that works, so a repository with no file gets a useful run. A bad file
is reported with the key, the value and what was expected (see :func:`format_config_errors`).

Longer than most modules: the whole `.github/paritybot.yml` schema, one model per section.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

CONFIG_PATH = ".github/paritybot.yml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# The largest defaults a step container gets; below them, defaults follow the engine's machine
# (see ResourceLimits), so a small host is never promised more than it has.
MEMORY_DEFAULT_MAX = "16g"
CPUS_DEFAULT_MAX = 8.0
SHM_DEFAULT_MAX = "8g"
TMPFS_DEFAULT_MAX = "4g"


class ResourceLimits(_Strict):
    """Limits of each step's container. Unset sizes are derived from the container engine's
    machine (``docker info``: MemTotal, NCPU), so the defaults fit any host."""

    memory: str | None = Field(
        None,
        description="container memory limit, no swap on top (docker syntax: 512m, 16g); "
        f"default: 3/4 of the engine's memory, at most {MEMORY_DEFAULT_MAX}",
    )
    pids: int = Field(4096, ge=16, description="maximum number of processes in the container")
    cpus: float | None = Field(
        None,
        gt=0,
        description=f"CPU quota, in CPUs; default: the engine's CPUs, at most {CPUS_DEFAULT_MAX:g}; "
        "a value above the engine's CPUs is lowered to them",
    )
    shm_size: str | None = Field(
        None,
        description="/dev/shm size; PyTorch data loaders need a large one; it counts against the "
        f"memory limit; default: half the memory limit, at most {SHM_DEFAULT_MAX}",
    )
    tmpfs_size: str | None = Field(
        None,
        description="size of the writable /tmp; it counts against the memory limit; "
        f"default: a quarter of the memory limit, at most {TMPFS_DEFAULT_MAX}",
    )
    workspace_size: str = Field(
        "10g",
        description="most the run's workspace may hold: the checkout, the home directory and all "
        "that steps write there; no file grows past it, and a step that goes past it is stopped "
        "and fails (docker syntax: 500m, 10g)",
    )


class StepNetwork(_Strict):
    """Which steps may reach the network. Everything that runs the pull request's code is offline
    unless the base branch's config says otherwise; only installing pre-commit's hook environments
    (in a container that holds the pre-commit config and nothing else of the pull request) is online."""

    precommit_install: bool = Field(
        True,
        description="install pre-commit's hook environments from the hook repositories the config names; "
        "this runs in its own container, which holds .pre-commit-config.yaml and no other file of the PR",
    )
    precommit: bool = Field(
        False,
        description="pre-commit's hooks may reach the network while they run (a `repo: local` hook is the "
        "PR's own code)",
    )
    setup: bool = Field(
        False,
        description="the set-up commands may reach the network (`pip install -e .` runs the PR's setup.py); "
        "bake the dependencies into the image instead where you can",
    )
    tests: bool = False
    probe: bool = False


class Environment(_Strict):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=64)]
    image: str | None = Field(
        None,
        description="container image CI uses; none: the service's default image "
        "(PARITYBOT_DEFAULT_IMAGE), else the run fails with 'no environment image configured'",
    )
    gpus: Literal["all", "none"] | int | list[str] = Field(
        "all", description="'all', 'none', a count, or a list of device ids"
    )
    branches: list[str] = Field(
        default_factory=list, description="base-branch globs that select this environment"
    )
    labels: list[str] = Field(default_factory=list, description="PR labels that add this environment")
    runs_on: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=64)] | None = Field(
        None,
        description="the agent label whose hosts run it (`paritybot agent --labels`, several hosts); "
        "default: the environment's name",
    )
    default: bool = Field(False, description="used when no branch or label rule matches")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment variables")
    user: str | None = Field(None, description="user to run as in the container; default: non-root")
    python: str | None = Field(
        None,
        description="local runs on the host (`paritybot check`): the project's interpreter, a path or a "
        "command on PATH, when neither --python nor an active virtualenv names one; containers use the "
        "image's",
    )
    setup: list[str] = Field(
        default_factory=list,
        description="shell commands run before the tests, e.g. 'pip install -e .'",
    )
    timeout_minutes: float = Field(60, gt=0, description="wall clock for the whole run")
    step_timeout_minutes: float = Field(30, gt=0, description="wall clock for one step")
    limits: ResourceLimits = Field(default_factory=ResourceLimits)
    network: StepNetwork = Field(default_factory=StepNetwork)

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, v: Any) -> Any:
        if isinstance(v, int) and v < 0:
            raise ValueError("a GPU count must be 0 or more")
        return v

    @property
    def queue(self) -> str:
        """The queue its runs wait in: agents serving this label take them."""
        return self.runs_on or self.name

    def matches_branch(self, base_ref: str | None) -> bool:
        return base_ref is not None and any(fnmatch.fnmatchcase(base_ref, g) for g in self.branches)


class ChecksToggle(_Strict):
    precommit: bool = True
    docstrings: bool = True
    tests: bool = True


class TestSettings(_Strict):
    __test__ = False
    paths: list[str] = Field(
        default_factory=list,
        description="test roots given to pytest; empty: what pytest collects with no arguments (its testpaths)",
    )
    always_run: list[str] = Field(default_factory=list, description="node ids or globs always selected")
    whole_suite_globs: list[str] = Field(
        default_factory=lambda: [
            "conftest.py",
            "**/conftest.py",
            "pyproject.toml",
            "setup.py",
            "setup.cfg",
            "requirements*.txt",
            "tox.ini",
            "pytest.ini",
            ".github/workflows/*",
            ".ci/*",
        ],
        description="a change to any of these runs the whole suite",
    )
    max_tests: int | None = Field(None, ge=1, description="budget: at most this many tests")
    reruns: int = Field(
        2,
        ge=0,
        le=10,
        description="reruns of a failing test at most, to tell flaky from failed; a rerun that fails "
        "with the same error as the attempt before ends them (the failure is deterministic)",
    )
    pre_existing: Literal["neutral", "failure"] = Field(
        "neutral",
        description="a test that fails on the merge base too (or is known flaky) does not fail the change "
        "(neutral), or does (failure)",
    )
    attribute_on_base: bool = Field(
        True, description="run the tests failing at the head on the merge base, to tell whose failure it is"
    )
    per_test_timeout_s: int = Field(300, ge=1)
    pytest_args: list[str] = Field(default_factory=list)
    use_coverage_map: bool = True


class PrecommitSettings(_Strict):
    config: str = Field(
        ".pre-commit-config.yaml",
        min_length=1,
        max_length=255,
        description="the pre-commit config, a path in the repository (pre-commit's own default name "
        "unless the project keeps it elsewhere, e.g. pre-commit.yaml)",
    )

    @field_validator("config")
    @classmethod
    def _inside(cls, path: str) -> str:
        # Read from git's objects at this path: it must name a file of the repository.
        if path.startswith("/") or "\\" in path or ".." in path.split("/") or path.endswith("/"):
            raise ValueError(f"{path!r} must be a file's path relative to the repository's root")
        return path


class DocstringSettings(_Strict):
    style: Literal["auto", "google", "numpy", "rest"] = "auto"
    require_returns: bool = True
    require_raises: bool = False
    exclude: list[str] = Field(default_factory=lambda: ["tests/*", "test/*", "**/tests/*", "docs/*"])


class ParitySettings(_Strict):
    packages: list[str] = Field(default_factory=lambda: ["numpy"], description="extra packages compared")
    reference: dict[str, str] = Field(
        default_factory=dict,
        description="pinned CI reference, field → value (e.g. torch: 2.3.0, cuda_runtime: '12.1')",
    )


DEFAULT_CHECKLIST = [
    "Motivation: why this change is needed",
    "Alternatives considered",
    "Backward compatibility and migration path",
    "Impact on downstream projects",
    "Link to the RFC",
]


class RfcSettings(_Strict):
    paths: list[str] = Field(default_factory=list, description="globs that need design review")
    labels: list[str] = Field(default_factory=lambda: ["rfc", "needs-rfc"])
    max_lines_changed: int | None = Field(1000, ge=1)
    new_dependencies: bool = True
    public_api: bool = True
    checklist: list[str] = Field(default_factory=lambda: list(DEFAULT_CHECKLIST))
    link_pattern: str = Field(
        r"https://github\.com/[\w.-]+/[\w.-]+/(issues|discussions|pull)/\d+|RFC-\d+",
        description="a regex; a match in the PR description ticks the RFC-link item",
    )

    @field_validator("link_pattern")
    @classmethod
    def _regex(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return v


TRUSTED_ASSOCIATIONS = ["OWNER", "MEMBER", "COLLABORATOR"]


class TrustSettings(_Strict):
    associations: list[
        Literal[
            "OWNER",
            "MEMBER",
            "COLLABORATOR",
            "CONTRIBUTOR",
            "FIRST_TIME_CONTRIBUTOR",
            "FIRST_TIMER",
            "MANNEQUIN",
            "NONE",
        ]
    ] = Field(default_factory=lambda: list(TRUSTED_ASSOCIATIONS))  # type: ignore[arg-type]
    users: list[str] = Field(default_factory=list, description="logins trusted whatever their association")
    teams: list[str] = Field(default_factory=list, description="org/team-slug whose members are trusted")
    permission_check: bool = Field(
        True, description="ask the collaborator-permission API when the association is ambiguous"
    )


PerfTrigger = Literal["label", "command", "every-pr"]
MIN_PERF_PROCESSES = 2  # per side: the verdict's interval is over the processes
DEFAULT_PERF_TRIGGERS: tuple[PerfTrigger, ...] = ("label", "command")


class PerformanceSettings(_Strict):
    """Benchmarks, base against head in one run (docs/performance.md). Off until a kind is named."""

    pytest: list[str] | None = Field(
        None, description="pytest-benchmark tests: the paths and options given to pytest; none: not run"
    )
    asv: str | None = Field(None, description="an asv suite: its configuration file, e.g. asv.conf.json")
    command: list[str] | None = Field(
        None, description="a command that prints the benchmark JSON shape, run once per round and side"
    )
    command_rounds: int = Field(10, ge=6, le=200, description="rounds of the command, per side")
    when: list[PerfTrigger] = Field(
        default_factory=lambda: list(DEFAULT_PERF_TRIGGERS),
        description="label: the PR has `label`; command: `/retest-gpu perf`; every-pr: each run",
    )
    label: str = Field("ciflow/perf", max_length=100)
    environments: list[str] = Field(
        default_factory=list, description="environment names that compare; empty: every one that runs"
    )
    threshold: float = Field(
        0.03, gt=0, lt=10, description="a regression: certainly slower, by more than this at the estimate"
    )
    confidence: float = Field(
        0.99,
        gt=0.5,
        lt=1,
        description="of the run's verdicts together: a change that touches no benchmark is called a "
        "regression or an improvement at most 1 - confidence of the time, however many there are",
    )
    blocking: bool = Field(False, description="a significant regression fails the check run")
    paths: list[str] = Field(default_factory=lambda: ["."], description="put first on PYTHONPATH, per side")
    processes: int = Field(
        8,
        le=16,
        description="processes per side at most (4 first, more for a benchmark they leave "
        "undecided); the interval is over them, so at least 2 (GPU memory: each holds a context)",
    )
    max_time_s: float = Field(
        1.2,
        gt=0,
        le=600,
        description="per benchmark, both sides; a decisive answer stops sooner, an undecided one may "
        "use what others left",
    )
    cpus: list[int] | None = Field(None, description="pin the run to these CPUs; default: its last one")

    @field_validator("processes")
    @classmethod
    def _processes_for_an_interval(cls, processes: int) -> int:
        if processes < MIN_PERF_PROCESSES:
            raise ValueError(
                f"at least {MIN_PERF_PROCESSES}: the interval is over the processes of each side, "
                f"and one process has no spread to measure"
            )
        return processes

    def enabled(self) -> bool:
        return bool(self.pytest is not None or self.asv or self.command)


class RepoConfig(_Strict):
    environments: list[Environment] = Field(
        default_factory=lambda: [Environment(name="default", default=True)],
        description="where runs happen; the default names no image, so it runs in the service's "
        "default image (PARITYBOT_DEFAULT_IMAGE) or not at all",
    )
    checks: ChecksToggle = Field(default_factory=ChecksToggle)
    precommit: PrecommitSettings = Field(default_factory=PrecommitSettings)
    tests: TestSettings = Field(default_factory=TestSettings)
    docstrings: DocstringSettings = Field(default_factory=DocstringSettings)
    parity: ParitySettings = Field(default_factory=ParitySettings)
    rfc: RfcSettings = Field(default_factory=RfcSettings)
    trust: TrustSettings = Field(default_factory=TrustSettings)
    performance: PerformanceSettings = Field(default_factory=PerformanceSettings)

    @field_validator("environments")
    @classmethod
    def _unique_names(cls, envs: list[Environment]) -> list[Environment]:
        if not envs:
            raise ValueError("at least one environment is needed")
        names = [e.name for e in envs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"environment names must be unique; repeated: {', '.join(dupes)}")
        return envs

    def environment(self, name: str) -> Environment | None:
        return next((e for e in self.environments if e.name == name), None)

    def default_environment(self) -> Environment:
        return next((e for e in self.environments if e.default), self.environments[0])


class _EveryDefault(GenerateJsonSchema):
    """pydantic leaves out defaults made by a factory (lists, nested settings); a user reading the
    schema needs them as much as the others, so they are computed and shown."""

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        factory = schema.get("default_factory")
        if factory is not None and not schema.get("default_factory_takes_data"):
            schema = {**schema, "default": factory()}  # type: ignore[call-arg]
            schema.pop("default_factory")
        return super().default_schema(schema)


def config_json_schema() -> dict[str, Any]:
    """The config's JSON Schema (`paritybot config schema`), with every default shown."""
    return RepoConfig.model_json_schema(schema_generator=_EveryDefault)


class ConfigError(Exception):
    """The repository's config file is invalid; ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str], path: str = CONFIG_PATH):
        self.problems = problems
        self.path = path
        super().__init__(f"{path}: " + "; ".join(problems))


def format_config_errors(exc: ValidationError) -> list[str]:
    """One line per error: the key, the value given and what was expected."""
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            lines.append(f"`{key}`: unknown key")
            continue
        value = err.get("input")
        shown = repr(value) if not isinstance(value, dict | list) else type(value).__name__
        if len(shown) > 80:
            shown = shown[:77] + "..."
        lines.append(f"`{key}` = {shown}: {err['msg']}")
    return lines


def parse_repo_config(text: str | None, path: str = CONFIG_PATH) -> RepoConfig:
    """Parse the YAML text of the config; ``None`` or empty means defaults."""
    if text is None or not text.strip():
        return RepoConfig()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"not valid YAML{where}: {problem}"], path) from None
    if data is None:
        return RepoConfig()
    if not isinstance(data, dict):
        raise ConfigError([f"expected a mapping at the top level, got {type(data).__name__}"], path)
    try:
        return RepoConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_config_errors(exc), path) from None
