"""The A/B benchmark run as one step, and its results file read back as a :class:`DriverReport`.

The step runs ``paritybot_perf_driver.py`` (``runner/perf/driver_script.py``, standard library
only) with ``python3 -I`` in the workspace, where the base and the head checkouts lie side by side
(directories of the same length, so that neither side's environment or paths are larger). The
driver's results come back as a collected file with a cap; what it says is validated field by
field, because the pull request's code ran in the same container and could have written it.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.core.config import PerformanceSettings
from bot.core.models import Selection
from bot.core.perf import DriverReport
from runner.backends.base import SCRATCH_DIR, Step, StepResult
from runner.git import export_commit
from runner.perf.worker import selected

DRIVER_MODULE = "paritybot_perf_driver"
PLUGIN_MODULE = "paritybot_perf_pytest"
# Injected beside the driver under these module names: the driver imports them from its directory.
HELPER_MODULES = {
    "paritybot_perf_worker": "worker.py",
    "paritybot_perf_asv": "asv_suite.py",
    "paritybot_perf_command": "command_output.py",
    "paritybot_perf_process": "process.py",
    "paritybot_perf_sequential": "sequential.py",
    "paritybot_perf_guard": "guard.py",
}
PERF_DIR = f"{SCRATCH_DIR}/perf"
SPEC_PATH = f"{PERF_DIR}/spec.json"
RESULTS_PATH = f"{PERF_DIR}/results.json"
RESULTS_MAX_BYTES = 8_000_000  # 500 benchmarks × 1000 rounds of three numbers fit with room
SIDES_DIR = PERF_DIR  # the base and head checkouts, side by side, in the workspace
SIDES = ("base", "head")  # names of one length: neither side gets a longer path or environment


class BenchmarkKindSpec(BaseModel):
    """One kind of benchmark the project has, as the driver is told to run it."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["pytest", "asv", "command"]
    args: list[str] = Field(default_factory=list, description="pytest: paths and options")
    config: str = Field("asv.conf.json", description="asv: the configuration file, from the root")
    argv: list[str] = Field(default_factory=list, description="command: what to run in each checkout")
    rounds: int = Field(10, ge=1, le=200, description="command: runs per side, warm-up excluded")


class SideSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    root: str = Field(description="the checkout, relative to the workspace")
    paths: list[str] = Field(default_factory=lambda: ["."], description="put first on PYTHONPATH")
    python: str = "python3"


class PerfPlan(BaseModel):
    """What the driver measures and how long: the spec file it reads."""

    model_config = ConfigDict(extra="forbid")

    sides: dict[Literal["base", "head"], SideSpec]
    kinds: list[BenchmarkKindSpec]
    processes: int = Field(
        8, ge=1, le=16, description="processes per side; rounds go to each pair in turn (layout effects)"
    )
    warmup: int = Field(1, ge=0, le=50, description="rounds per pair of processes run first and discarded")
    min_rounds: int = Field(10, ge=1, le=1000)
    max_rounds: int = Field(600, ge=1, le=1000)
    round_time_s: float = Field(
        0.002, gt=0, description="time one round aims at on one side: short, so few are preempted"
    )
    max_time_s: float = Field(
        1.2,
        gt=0,
        description="per benchmark, both sides, unless min_rounds needs more; less once decisive, up "
        "to twice as much for an undecided one from what decisive ones left",
    )
    threshold: float = Field(0.03, gt=0, lt=10, description="what decisive means: see PerfThresholds")
    error: float = Field(
        0.01, gt=0, lt=0.5, description="the run's error (1 - confidence), spread over benchmarks and looks"
    )
    timeout_s: float = Field(300.0, gt=0, description="for one round, or one side's set-up of a benchmark")
    cpus: list[int] | None = Field(None, description="pin the run to these CPUs; default: its last one")
    gpu: str | None = Field(None, description="CUDA_VISIBLE_DEVICES for both sides")
    names: list[str] | None = Field(
        None, description="only these benchmarks, or those in these files or tests (a selection); pytest only"
    )


def plan_from_settings(
    settings: PerformanceSettings, *, base_root: str, head_root: str, names: list[str] | None = None
) -> PerfPlan:
    """The driver's plan from the repository's ``performance:`` config; with no kind named, the
    pytest-benchmark tests pytest finds with the project's own configuration."""
    kinds = []
    if settings.pytest is not None:
        kinds.append(BenchmarkKindSpec(kind="pytest", args=settings.pytest))
    if settings.asv:
        kinds.append(BenchmarkKindSpec(kind="asv", config=settings.asv))
    if settings.command:
        kinds.append(BenchmarkKindSpec(kind="command", argv=settings.command, rounds=settings.command_rounds))
    return PerfPlan(
        sides={
            "base": SideSpec(root=base_root, paths=settings.paths),
            "head": SideSpec(root=head_root, paths=settings.paths),
        },
        kinds=kinds or [BenchmarkKindSpec(kind="pytest")],
        processes=settings.processes,
        max_time_s=settings.max_time_s,
        threshold=settings.threshold,
        error=1 - settings.confidence,
        cpus=settings.cpus,
        names=names,
    )


def selected_benchmarks(selection: Selection) -> list[str] | None:
    """The pytest benchmarks a change can affect, as the test selection chose them (None: all)."""
    return None if selection.whole_suite else [t.nodeid for t in selection.tests]


def why_selected(name: str, selection: Selection) -> list[str]:
    """The selection's reasons for the tests or files that hold benchmark ``name``."""
    if selection.whole_suite:
        return list(selection.whole_suite_reasons)
    return [reason for t in selection.tests if selected(name, [t.nodeid]) for reason in t.reasons]


@cache
def driver_files() -> dict[str, str]:
    """The driver, its helpers and its pytest plugin, as injected: module name → source."""
    package = resources.files("runner.perf")
    files = {DRIVER_MODULE: "driver_script.py", PLUGIN_MODULE: "pytest_plugin.py", **HELPER_MODULES}
    return {module: package.joinpath(file).read_text(encoding="utf-8") for module, file in files.items()}


def perf_step(plan: PerfPlan, *, timeout_s: float = 3600.0, network: bool = False) -> Step:
    inject = {f"{PERF_DIR}/{module}.py": source for module, source in driver_files().items()}
    inject[SPEC_PATH] = plan.model_dump_json()
    return Step(
        name="performance",
        argv=["python3", "-I", f"{PERF_DIR}/{DRIVER_MODULE}.py", SPEC_PATH, RESULTS_PATH],
        inject=inject,
        collect=[RESULTS_PATH],
        collect_max_bytes=RESULTS_MAX_BYTES,
        timeout_s=timeout_s,
        network=network,
    )


class PerfRunError(Exception):
    """The driver produced no readable results; the message says why."""


def export_sides(workspace: Path, base_sha: str, head_sha: str) -> None:
    """The base and head trees side by side under :data:`SIDES_DIR` of ``workspace``, from the
    checkout's git objects, before any step copies the workspace into a container.

    The workspace is the pull request's checkout: a ``.paritybot`` it committed (a link to
    elsewhere, or a tree of its own where the sides go) is refused, never written through.
    """
    where = _sides_dir(workspace)
    if where.exists():
        raise PerfRunError(f"the pull request has its own `{SIDES_DIR}`; not compared")
    for side, sha in zip(SIDES, (base_sha, head_sha), strict=True):
        export_commit(workspace, sha, where / side)


def export_base(workspace: Path, base_sha: str) -> str:
    """The base tree at ``SIDES_DIR/base`` (workspace-relative path returned), unless the
    performance comparison already put it there; the same refusals as :func:`export_sides`."""
    where = _sides_dir(workspace)
    base = where / SIDES[0]
    if base.is_dir() and not base.is_symlink() and (where / SIDES[1]).is_dir():
        return f"{SIDES_DIR}/{SIDES[0]}"  # laid out by export_sides in this run
    if where.exists():
        raise PerfRunError(f"the pull request has its own `{SIDES_DIR}`")
    export_commit(workspace, base_sha, base)
    return f"{SIDES_DIR}/{SIDES[0]}"


def _sides_dir(workspace: Path) -> Path:
    """Where the sides go; PerfRunError when the pull request committed a link or file on the way."""
    where = workspace
    for part in Path(SIDES_DIR).parts:
        where = where / part
        if where.is_symlink() or (where.exists() and not where.is_dir()):
            raise PerfRunError(f"the pull request has its own `{where.relative_to(workspace)}`; not compared")
    return where


def parse_results(result: StepResult) -> DriverReport:
    """The driver's report, or PerfRunError with one line saying why there is none."""
    refusal = result.refusal(RESULTS_PATH, "the benchmark results file")
    if refusal:
        raise PerfRunError(refusal)
    text = result.collected.get(RESULTS_PATH)
    if text is None:
        tail = result.output.strip().splitlines()[-1:] or [""]
        raise PerfRunError(
            f"the benchmark driver wrote no results ({result.describe_failure()}) {tail[0][:200]}"
        )
    try:
        report = DriverReport.model_validate(json.loads(text))
    except (ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0][:200]
        raise PerfRunError(f"the benchmark results could not be read: {first}") from None
    if report.tampered:
        raise PerfRunError(report.tampered)
    return report
