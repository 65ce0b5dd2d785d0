"""What `paritybot repro` says, decided from plain values: the parity between the run and here, the
GPU warning, whether the rerun reproduced the run's failure, and the interactive shell's start-up.
"""

from __future__ import annotations

import re
import shlex

from bot.cli.repro_record import ReproRecord, ReproTest
from bot.core.models import EnvFacts, ParityRow, ParityVerdict
from runner.parity import build_parity

# pytest's exit codes (pytest.ExitCode): 0 passed, 1 some failed, 5 none collected.
PASSED, FAILED, NONE_COLLECTED = 0, 1, 5
_ERROR_LINE = re.compile(r"^E\s+(.*\S)\s*$", re.MULTILINE)


def parity_rows(run: EnvFacts | None, here: EnvFacts | None) -> list[ParityRow]:
    """The parity rows of the run (``this_run``) against this machine (``contributor``)."""
    return build_parity(None, run, here, packages=[]).rows


def parity_table(rows: list[ParityRow]) -> list[str]:
    """The rows as aligned text: what | the run | here | verdict."""
    cells = [("", "the run", "here", "")]
    for row in rows:
        verdict = "" if row.contributor_verdict == ParityVerdict.UNKNOWN else row.contributor_verdict.value
        cells.append((row.label, row.this_run or "?", row.contributor or "?", verdict))
    widths = [max(len(c[i]) for c in cells) for i in range(4)]
    return ["  ".join(c.ljust(w) for c, w in zip(cell, widths, strict=True)).rstrip() for cell in cells]


def differences(rows: list[ParityRow]) -> list[str]:
    return [
        f"{row.label}: the run {row.this_run or '?'}, here {row.contributor or '?'}"
        for row in rows
        if row.contributor_verdict == ParityVerdict.DIFFERS
    ]


def gpu_warning(gpus: str | int | list[str], run: EnvFacts | None, here: EnvFacts | None) -> str | None:
    """A warning when this machine cannot give the test the GPUs the run had."""
    if gpus == "none":
        return None
    run_models = (run.gpu_models if run else None) or []
    here_models = (here.gpu_models if here else None) or []
    wanted = len(gpus) if isinstance(gpus, list) else gpus if isinstance(gpus, int) else len(run_models)
    if len(here_models) < wanted or (wanted == 0 and not here_models):
        return (
            f"warning: the run had gpus: {gpus} ({', '.join(run_models) or 'models not known'}); "
            f"here the container sees {len(here_models)} GPU(s): a GPU test may fail or pass for that alone"
        )
    if run_models and sorted(set(run_models)) != sorted(set(here_models)):
        return (
            f"warning: the run's GPUs were {', '.join(sorted(set(run_models)))}; here "
            f"{', '.join(sorted(set(here_models)))}: results may differ"
        )
    return None


def _first_error(test: ReproTest) -> str | None:
    for text in (test.message, test.traceback):
        if found := _ERROR_LINE.search(text):
            return found.group(1)
    return None


def outcome(test: ReproTest, exit_code: int | None, output: str, rows: list[ParityRow]) -> tuple[str, bool]:
    """The verdict line, and whether the run's failure was reproduced."""
    if exit_code == PASSED:
        differ = differences(rows)
        what = "; ".join(differ) if differ else "nothing the probe sees (timing, data or the network?)"
        return f"did not reproduce: it passed here; what differs from the run: {what}", False
    if exit_code == NONE_COLLECTED:
        return f"did not reproduce: pytest found no test {test.nodeid} at this commit", False
    if exit_code != FAILED:
        return f"did not reproduce: pytest could not run the test (exit code {exit_code})", False
    error = _first_error(test)
    if test.outcome == "unknown":
        return "the test fails here (the run's record has no failure of it to compare with)", True
    if error is None or error in output:
        return "reproduced: the same failure" + (f" ({error})" if error else ""), True
    return f"reproduced a failure, but a different one: the run's was {error!r}", True


def test_command(record: ReproRecord, nodeid: str) -> list[str]:
    return ["python", "-m", "pytest", *record.pytest_args, nodeid]


def shell_rc(record: ReproRecord, nodeid: str, workdir: str) -> str:
    """The interactive shell's start-up file: the prompt names the commit, the test is in history."""
    command = shlex.join(test_command(record, nodeid))
    return "\n".join(
        [
            "# written by paritybot repro",
            "HISTFILE=$HOME/.paritybot_repro_history",
            f"cd {shlex.quote(workdir)}",
            f"PS1='(repro {record.head_sha[:12]}) \\w \\$ '",
            f"history -s {shlex.quote(command)}",
            f"echo {shlex.quote(f'paritybot repro: run {record.id} at {record.head_sha[:12]}; up-arrow: {command}')}",
            "",
        ]
    )


_LOGIN = ("unauthorized", "denied", "authentication required", "no basic auth credentials", "login")
_UNREACHABLE = (
    "no such host",
    "connection refused",
    "timeout",
    "i/o timeout",
    "network is unreachable",
    "dial tcp",
)


def pull_hint(message: str, image: str) -> str:
    """The runner's error about the image, with what to do when the registry is the cause."""
    lower = message.lower()
    registry = image.split("/", 1)[0] if "/" in image and "." in image.split("/", 1)[0] else "docker.io"
    if any(word in lower for word in _LOGIN):
        return f"{message}\nthe registry needs a login: `docker login {registry}`, then run this again"
    if any(word in lower for word in _UNREACHABLE):
        return f"{message}\nthe registry {registry} cannot be reached from here; pull {image} where it can and load it"
    return message
