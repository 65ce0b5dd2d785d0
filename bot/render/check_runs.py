"""The check runs: one per check and environment, in the shape GitHub's Checks API takes, and the
outputs of check runs before their run has results (queued, started, waiting for approval,
invalid config). A run's results are rendered by :mod:`bot.render.check_results`.

Check-run design (argued in docs/reporting.md): one check run per check, named
``paritybot / <check> (<environment>)``, so a repository can require the tests but not the
docstrings, and a check that finished early can be completed while the tests still run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from bot.core import limits
from bot.core.config import CONFIG_PATH
from bot.core.kinds import CHECK_KINDS, COMMAND, CheckKind
from bot.core.models import (
    Model,
)
from bot.render import markdown as md


def check_run_name(kind: CheckKind, environment: str) -> str:
    """The check run's name; stable per check and environment, so branch protection can require it."""
    return f"paritybot / {kind.value} ({environment})"


CheckRunStatus = Literal["queued", "in_progress", "completed"]


Conclusion = Literal["success", "failure", "neutral", "cancelled", "timed_out", "action_required", "skipped"]


class CheckRunOutput(Model):
    """One check run's state and output, in the shape GitHub's create/update endpoints take."""

    kind: CheckKind
    name: str
    status: CheckRunStatus
    conclusion: Conclusion | None = None
    title: str = Field(max_length=limits.CHECK_TITLE_MAX)
    summary: str
    text: str = ""
    annotations: list[dict[str, Any]] = Field(default_factory=list)

    @field_validator("summary", "text")
    @classmethod
    def _within_limit(cls, value: str) -> str:
        if not limits.fits(value, limits.CHECK_SUMMARY_MAX):
            raise ValueError(f"longer than GitHub's {limits.CHECK_SUMMARY_MAX:,} characters")
        return value

    @model_validator(mode="after")
    def _conclusion_iff_completed(self) -> CheckRunOutput:
        if (self.status == "completed") != (self.conclusion is not None):
            raise ValueError("a conclusion is given exactly when the status is completed")
        return self

    def request_body(self, annotations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The JSON for POST /check-runs or PATCH /check-runs/{id}, with one batch of annotations.

        The caller adds ``head_sha``, ``details_url`` and the timestamps (the clock lives there).
        """
        output: dict[str, Any] = {"title": self.title, "summary": self.summary}
        if self.text:
            output["text"] = self.text
        if annotations:
            output["annotations"] = annotations
        body: dict[str, Any] = {"name": self.name, "status": self.status, "output": output}
        if self.conclusion is not None:
            body["conclusion"] = self.conclusion
        return body


def in_progress_title(step: str | None = None) -> str:
    """The title of a check run whose run has started: what it is doing now."""
    return f"Running {step}…" if step else "Preparing the environment…"


def render_queued_output(environment: str, *, queue_position: int | None = None) -> list[CheckRunOutput]:
    """The check runs created when a run is queued, one per check, status ``queued``."""
    place = f"#{md.ZWSP}{queue_position:,} in the GPU queue" if queue_position else "Waiting for a GPU runner"
    summary = f"Queued in environment {md.code(environment)}. This check updates when the run starts."
    return [
        CheckRunOutput(
            kind=k, name=check_run_name(k, environment), status="queued", title=place, summary=summary
        )
        for k in CHECK_KINDS
    ]


def render_in_progress_output(
    environment: str, *, step: str | None = None, attempt: int = 1
) -> list[CheckRunOutput]:
    """The check runs once the run has started, before any check has a result."""
    summary = f"Running in environment {md.code(environment)}."
    if attempt > 1:
        summary += f" Attempt {attempt}: the one before was stopped before it finished."
    return [
        CheckRunOutput(
            kind=k,
            name=check_run_name(k, environment),
            status="in_progress",
            title=in_progress_title(step),
            summary=summary,
        )
        for k in CHECK_KINDS
    ]


def render_awaiting_approval_output(environment: str, *, reason: str) -> list[CheckRunOutput]:
    """``action_required``: nothing runs until someone trusted approves this commit."""
    summary = limits.truncate(reason, limits.CHECK_SUMMARY_MAX - limits.SAFETY_MARGIN)
    return _completed_before_running(environment, "action_required", "Waiting for approval", summary)


def render_config_error_output(environment: str, *, problems: Sequence[str]) -> list[CheckRunOutput]:
    """``failure`` on every check: a broken config runs nothing, and must not look like a pass."""
    listed = "\n".join(f"- {md.prose(p)}" for p in problems) or "- the file could not be read"
    summary = limits.truncate(
        f"paritybot could not read {md.code(CONFIG_PATH)}, so nothing ran:\n\n{listed}",
        limits.CHECK_SUMMARY_MAX - limits.SAFETY_MARGIN,
    )
    return _completed_before_running(environment, "failure", f"Invalid {CONFIG_PATH}", summary)


def abandoned_output(name: str) -> CheckRunOutput:
    """A check run of this App left open by a run paritybot has no record of (or a second one of
    the same check): completed, so that it never blocks the pull request, saying why."""
    kind = next((k for k in CHECK_KINDS if name.startswith(f"paritybot / {k.value} ")), CheckKind.TESTS)
    summary = (
        "paritybot has no run that would finish this check run (its record was lost, or another "
        f"check run of the same check took its place), so it was closed. Comment `{COMMAND}` to "
        "run the checks again."
    )
    return CheckRunOutput(
        kind=kind, name=name, status="completed", conclusion="cancelled", title="Abandoned", summary=summary
    )


def _completed_before_running(
    environment: str, conclusion: Conclusion, title: str, summary: str
) -> list[CheckRunOutput]:
    """Every check completed the same way, without a run: nothing ran, and each check says why."""
    return [
        CheckRunOutput(
            kind=k,
            name=check_run_name(k, environment),
            status="completed",
            conclusion=conclusion,
            title=title,
            summary=summary,
        )
        for k in CHECK_KINDS
    ]
