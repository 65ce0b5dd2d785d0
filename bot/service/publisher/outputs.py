"""What GitHub shows of a run, as a function of what the store holds of it (pure).

The publisher sends these; each is decided from the stored run alone, so publishing the same
stored state twice sends the same outputs, which the reporter then leaves alone (a check run is
sent only when its digest changed, the summary only when its body did).
"""

from __future__ import annotations

from bot.core.kinds import CheckKind, Reaction
from bot.core.models import RunReport, RunState
from bot.core.verdict import Verdict, verdict
from bot.render.check_results import render_check_runs, render_performance_check
from bot.render.check_runs import CheckRunOutput, render_in_progress_output, render_queued_output
from bot.service.store.records import Job


def queued_outputs(job: Job, position: int | None) -> list[CheckRunOutput]:
    """A waiting run: every check run queued, with its place in the queue."""
    return render_queued_output(job.environment, queue_position=position)


def running_outputs(job: Job, so_far: RunReport | None) -> list[CheckRunOutput]:
    """A running run: every check in progress (saying which attempt), except those whose result is
    already known (early results), completed; and the tests while they run, once one failed."""
    early: dict[CheckKind, CheckRunOutput] = {}
    if so_far is not None:
        streaming = so_far.tests is not None and so_far.tests.in_progress is not None
        early = {
            out.kind: out
            for out in render_check_runs(so_far)
            if out.status == "completed" or (streaming and out.kind == CheckKind.TESTS)
        }
    outputs = [
        early.get(out.kind, out) for out in render_in_progress_output(job.environment, attempt=job.attempts)
    ]
    # Sent in this order: every check shows the run started before any shows its result.
    return sorted(outputs, key=lambda out: out.status == "completed")


def final_outputs(report: RunReport) -> list[CheckRunOutput]:
    """A finished run: every check run completed; the performance one only for a run that
    compared benchmarks."""
    performance = render_performance_check(report)
    return [*render_check_runs(report), *([performance] if performance else [])]


def final_reaction(job: Job, report: RunReport) -> Reaction | None:
    """The command's reaction once its run ended: 🚀 passed, 👎 failed or broke; none for a
    cancelled run (the command was not wrong) or a run no command asked for."""
    if job.request.comment_id is None or job.state == RunState.CANCELLED:
        return None
    return Reaction.PASSED if passed(report) else Reaction.FAILED


def passed(report: RunReport) -> bool:
    return report.state == RunState.SUCCEEDED and verdict(report) in (
        Verdict.PASS,
        Verdict.FLAKY_ONLY,
        Verdict.NOTHING_TO_CHECK,
    )
