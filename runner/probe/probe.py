"""The environment probe as a step, and its JSON output as :class:`EnvFacts`.

The probe script (``runner/probe/script.py``, standard library only) is run first in every run,
by whichever runner serves the run, so the facts describe the interpreter the tests will use.
It runs isolated, so that a pull request cannot lie to it: in an empty directory outside the
workspace (a scratch step), before the workspace is even copied into a container, with
``python3 -I`` (no script directory, current directory, ``PYTHON*`` variables or user
site-packages on its path). A ``torch/`` package or ``torch-9.9.dist-info`` committed to the PR,
a ``json.py`` beside the script, or a ``gcc`` found through a relative ``PATH`` entry is never
imported, read or run. Parsing is pure: a step that failed or printed something that is not the
probe's JSON still becomes EnvFacts, with notes that say what went wrong.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from pydantic import ValidationError

from bot.core.models import EnvFacts
from runner.backends.base import Step, StepResult

PROBE_PATH = "probe.py"  # in the step's own scratch directory
# The probe imports torch in a child process with its own deadline (120 s); the step's deadline
# covers that plus nvidia-smi, nvcc and the compilers at 30 s each in the worst case.
PROBE_TIMEOUT_S = 300.0
_FACT_FIELDS = frozenset(EnvFacts.model_fields) - {"source", "notes", "missing"}


@cache
def probe_source() -> str:
    """The probe script's text, as shipped inside the ``runner`` package."""
    return resources.files("runner.probe").joinpath("script.py").read_text(encoding="utf-8")


def probe_step(packages: list[str], *, network: bool = False, timeout_s: float = PROBE_TIMEOUT_S) -> Step:
    """The first step of a run: print the environment's facts as one JSON object."""
    # Names starting with "-" would reach the script's argv as options; none is a package name.
    names = [p for p in dict.fromkeys(packages) if p and not p.startswith("-")]
    return Step(
        name="probe",
        argv=["python3", "-I", PROBE_PATH, *names],
        inject={PROBE_PATH: probe_source()},
        scratch=True,
        network=network,
        timeout_s=timeout_s,
    )


def parse_probe(result: StepResult) -> EnvFacts:
    """EnvFacts from the probe step's output; never raises, explains in ``notes`` instead."""
    if result.error or result.timed_out or result.oom_killed or result.cancelled or result.stopped_by_limit:
        return _unknown(f"the probe did not run to the end: {result.describe_failure()}")
    data = _last_json_object(result.output)
    if data is None:
        detail = f"exit code {result.exit_code}; output began: {result.output.strip()[:200]!r}"
        return _unknown(f"the probe printed no JSON object ({detail})")
    return facts_from_probe_json(data)


def facts_from_probe_json(data: dict[str, Any]) -> EnvFacts:
    """Validate the probe's object field by field: one bad value loses that field, not the rest."""
    facts: dict[str, Any] = {}
    notes = [str(n) for n in data.get("notes") or [] if isinstance(n, str | int | float)]
    for key in sorted(_FACT_FIELDS & data.keys()):
        try:
            EnvFacts.model_validate({"source": "probe", key: data[key]})
        except ValidationError:
            notes.append(f"the probe's value for {key} was not understood: {data[key]!r:.120}")
            continue
        facts[key] = data[key]
    missing = [k for k in _ordered_fields() if facts.get(k) in (None, [], "")]
    missing = [k for k in missing if k != "packages"]
    return EnvFacts.model_validate({"source": "probe", **facts, "missing": missing, "notes": notes})


def _ordered_fields() -> list[str]:
    return [k for k in EnvFacts.model_fields if k in _FACT_FIELDS]


def _unknown(note: str) -> EnvFacts:
    return EnvFacts(source="probe", missing=[k for k in _ordered_fields() if k != "packages"], notes=[note])


def _last_json_object(output: str) -> dict[str, Any] | None:
    # The probe prints one line of JSON last; anything before it (a sitecustomize banner, a
    # deprecation warning on stderr, which the runner merges into the output) is ignored.
    for line in reversed(output.strip().splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None
