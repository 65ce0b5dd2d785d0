#!/usr/bin/env python3
"""torch.utils.benchmark measurements printed as paritybot's benchmark JSON (docs/performance.md).

Configure it as a ``command`` benchmark (``argv: [python, benchmarks/torch_benchmarks.py]``):
paritybot runs it once per round in the base and in the head checkout, alternating which goes
first, and compares the medians of the samples it prints. ``torch.utils.benchmark.Timer``
synchronises CUDA around each measurement, so GPU work is inside the times.

Each ``Measurement`` becomes one entry: ``name`` from its title (label, sub-label, description),
``unit`` seconds, ``samples`` its ``times`` (seconds per call, one per block of
``number_per_run`` calls).
"""

from __future__ import annotations

import json
from typing import Any

import torch
from torch.utils.benchmark import Measurement, Timer


def entry(measurement: Measurement) -> dict[str, Any]:
    """One benchmark of the JSON shape from one Measurement."""
    parts = [measurement.label, measurement.sub_label, measurement.description]
    return {
        "name": " / ".join(p for p in parts if p) or measurement.stmt,
        "unit": "s",
        "samples": list(measurement.times),
        "iterations": measurement.number_per_run,
    }


def measurements(device: str) -> list[Measurement]:
    a = torch.randn(256, 256, device=device)
    image = torch.randn(8, 3, 64, 64, device=device)
    conv = torch.nn.Conv2d(3, 16, 3).to(device)
    timers = [
        Timer("a @ a", globals={"a": a}, label="matmul", sub_label="256x256", description=device),
        Timer(
            "conv(x)",
            globals={"conv": conv, "x": image},
            label="conv2d",
            sub_label="8x3x64x64",
            description=device,
        ),
    ]
    return [timer.blocked_autorange(min_run_time=0.2) for timer in timers]


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        benchmarks = [entry(m) for m in measurements(device)]
    except Exception as exc:  # reported as an error of the benchmarks, which paritybot shows as such
        benchmarks = [{"name": f"torch benchmarks ({device})", "error": repr(exc)}]
    # One JSON line, printed last: whatever the project prints before it is ignored.
    print(json.dumps({"benchmarks": benchmarks}))


if __name__ == "__main__":
    main()
