"""A run as JSON, ``/runs/<id>.json``: what the run page shows, in a stable, versioned shape.

``paritybot repro`` reads it to rebuild a run's environment, so every field is documented in
docs/run-page.md and a change that removes or renames one raises ``SCHEMA_VERSION``; new fields
with defaults do not. Everything is the run's own record, uncut (the comment's cuts are GitHub's
size limits, which this record does not have), except each step's output, which is served by the
page's log (the record says how much was kept and cut).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bot.core.config import Environment
from bot.core.models import (
    CheckStatus,
    EnvFacts,
    ParityReport,
    RunReport,
    RunRequest,
    RunState,
    Selection,
    TestCaseResult,
    TestOutcome,
)
from bot.core.perf import PerformanceResult
from bot.render.run_steps import StepView

SCHEMA_VERSION: Literal[1] = 1
# Names of variables whose values a record never shows (a config may hold a token by mistake).
_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE|(^|_)KEY($|_)|AUTH", re.IGNORECASE
)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RecordEnvironment(_Record):
    name: str
    runner: str = Field(description="docker or host; empty when no runner started")
    runner_reason: str = ""
    image: str | None = Field(None, description="the image as configured (name:tag)")
    image_digest: str | None = Field(None, description="the image's repo digest (sha256:…), when it has one")
    image_ref: str | None = Field(None, description="how to pull exactly this image: repo@sha256:… or its id")
    gpus: str | int | list[str] = Field("none", description="the environment's gpus setting")
    setup: list[str] = Field(default_factory=list, description="the set-up commands, in order")
    env: dict[str, str] = Field(
        default_factory=dict, description="the variables set in the steps, secrets left out"
    )
    env_hidden: list[str] = Field(
        default_factory=list, description="variables set whose values are not shown"
    )
    user: str | None = None
    memory: str | None = None
    shm_size: str | None = None
    networked_steps: list[str] = Field(default_factory=list)
    probe: EnvFacts | None = Field(None, description="what the probe saw inside the image")


class RecordStep(_Record):
    index: int
    name: str
    state: str
    started_at: datetime
    duration_s: float | None
    exit_code: int | None
    reason: str
    output_chars: int = Field(description="characters of output kept")
    cut_chars: int = Field(description="characters of output left out between head and tail")


class RecordTest(_Record):
    nodeid: str
    outcome: TestOutcome
    duration_s: float
    message: str = Field(description="the first lines of the error, as the comment shows them")
    traceback: str = Field(description="the whole traceback as pytest reported it")
    repro: list[str] = Field(description="shell commands that run it again in the same image")
    cause: str | None = Field(None, description="new, pre-existing or flaky; None when not attributed")
    attempts: int


class RunRecord(_Record):
    schema_version: Literal[1] = SCHEMA_VERSION
    id: str
    url: str | None = Field(None, description="the run page")
    repository: str
    clone_url: str
    private: bool | None
    pr_number: int | None
    kind: str = Field(description="pull_request or baseline")
    trigger: str
    head_sha: str
    head_ref: str | None
    base_ref: str | None
    base_sha: str | None = Field(None, description="the merge base the change is measured from")
    merged: Literal[False] = Field(
        False,
        description="always false: paritybot checks the head commit as pushed, not a merge with the base",
    )
    state: RunState
    error: str | None
    created_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    attempt: int
    environment: RecordEnvironment
    pytest_args: list[str] = Field(
        default_factory=list, description="the project's pytest options (tests.pytest_args)"
    )
    steps: list[RecordStep]
    tests_status: CheckStatus | None
    failing_tests: list[RecordTest]
    selection: Selection | None = Field(description="which tests ran and why")
    parity: ParityReport | None
    performance: PerformanceResult | None
    report: RunReport | None = Field(description="the run's whole report, as the store keeps it")


class RunMeta(_Record):
    """What the store knows of a run besides its report."""

    id: str
    request: RunRequest
    environment: str
    state: RunState
    error: str | None = None
    attempts: int = 0
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


def public_env(env: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The variables to show, and the names of those whose values look secret."""
    hidden = sorted(name for name in env if _SECRET_NAME.search(name))
    return {k: v for k, v in env.items() if k not in hidden}, hidden


def _environment(meta: RunMeta, report: RunReport | None) -> RecordEnvironment:
    config = meta.request.config
    env_config: Environment | None = config.environment(meta.environment) if config else None
    shown, hidden = public_env(env_config.env if env_config else {})
    r = report
    return RecordEnvironment(
        name=meta.environment,
        runner=r.runner if r else "",
        runner_reason=r.runner_reason if r else "",
        image=(r.image if r else None) or (env_config.image if env_config else None),
        image_digest=r.image_digest if r else None,
        image_ref=r.image_ref if r else None,
        gpus=env_config.gpus if env_config else "none",
        setup=list(env_config.setup) if env_config else [],
        env=shown,
        env_hidden=hidden,
        user=env_config.user if env_config else None,
        memory=env_config.limits.memory if env_config else None,
        shm_size=env_config.limits.shm_size if env_config else None,
        networked_steps=list(r.networked_steps) if r else [],
        probe=r.probe if r else None,
    )


def _failing(results: list[TestCaseResult]) -> list[RecordTest]:
    return [
        RecordTest(
            nodeid=t.nodeid,
            outcome=t.outcome,
            duration_s=t.duration_s,
            message=t.message,
            traceback=t.traceback or t.message,
            repro=list(t.repro),
            cause=t.cause.value if t.cause else None,
            attempts=t.attempts,
        )
        for t in results
        if t.outcome in (TestOutcome.FAILED, TestOutcome.ERROR)
    ]


def run_record(meta: RunMeta, report: RunReport | None, steps: list[StepView], url: str | None) -> RunRecord:
    req, tests = meta.request, report.tests if report else None
    return RunRecord(
        id=meta.id,
        url=url,
        repository=req.repo,
        clone_url=req.clone_url,
        private=req.private,
        pr_number=req.pr_number,
        kind=req.kind.value,
        trigger=req.trigger,
        head_sha=req.head_sha,
        head_ref=req.head_ref,
        base_ref=req.base_ref,
        base_sha=(report.base_sha if report else None) or req.base_sha,
        state=meta.state,
        error=meta.error or (report.error if report else None),
        created_at=meta.created_at,
        started_at=meta.started_at,
        finished_at=meta.finished_at,
        attempt=meta.attempts,
        environment=_environment(meta, report),
        pytest_args=list(req.config.tests.pytest_args) if req.config else [],
        steps=[
            RecordStep(
                index=s.index,
                name=s.name,
                state=s.state,
                started_at=s.started_at,
                duration_s=s.duration_s,
                exit_code=s.exit_code,
                reason=s.reason,
                output_chars=len(s.output),
                cut_chars=s.cut_chars,
            )
            for s in steps
        ],
        tests_status=tests.status if tests else None,
        failing_tests=_failing(tests.results) if tests else [],
        selection=tests.selection if tests else None,
        parity=report.parity if report else None,
        performance=report.performance if report else None,
        report=report,
    )
