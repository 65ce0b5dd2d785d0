"""What a benchmark command prints, read into one value per benchmark and run.

Standard library only, valid on Python 3.8. Injected as ``paritybot_perf_command.py`` beside the
driver; the JSON shape is in docs/performance.md.
"""

from __future__ import annotations

import json

from paritybot_perf_worker import clip as _clip

MAX_NAME = 300
MAX_BENCHMARKS = 500


UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_command_output(text, side):
    """The last line of ``text`` that is a JSON object with ``benchmarks``; name → median seconds."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            document = json.loads(line)
        except ValueError:
            continue
        if isinstance(document, dict) and isinstance(document.get("benchmarks"), list):
            return _command_values(document["benchmarks"]), None
    return {}, "the command printed no JSON line with benchmarks on " + side


def _command_values(entries):
    values = {}
    for entry in entries[:MAX_BENCHMARKS]:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        name = entry["name"][:MAX_NAME]
        if entry.get("error") is not None:
            values[name] = "the benchmark reported an error: " + _clip(entry["error"], 500)
            continue
        scale = UNITS.get(entry.get("unit", "s"))
        samples = entry.get("samples")
        if scale is None or not isinstance(samples, list):
            values[name] = "unit must be one of s, ms, us, ns and samples a list of numbers"
            continue
        numbers = sorted(float(s) * scale for s in samples if isinstance(s, (int, float)) and s > 0)
        if not numbers:
            values[name] = "no positive sample"
            continue
        mid = len(numbers) // 2
        values[name] = numbers[mid] if len(numbers) % 2 else (numbers[mid - 1] + numbers[mid]) / 2
    return values
