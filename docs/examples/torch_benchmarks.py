#!/usr/bin/env python3
"""torch.utils.benchmark measurements printed as paritybot's benchmark JSON (docs/performance.md).

Configure it as a ``command`` benchmark (``argv: [python, benchmarks/torch_benchmarks.py]``):
paritybot runs it once per round in the base and in the head checkout, alternating which goes
first, and compares the medians of the samples it prints.

On the CPU, each ``Measurement`` becomes one entry: ``name`` from its title (label, sub-label,
description), ``unit`` seconds, ``samples`` its ``times`` (seconds per call, one per block of
``number_per_run`` calls). On a CUDA device the blocks are timed again with CUDA events, the
device synchronised before and after each block (:func:`event_samples`): the GPU's own time,
which a busy host CPU or the launch of the next kernel does not stretch; ``blocked_autorange``
only chooses the block size.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.benchmark import Measurement, Timer

BLOCKS = 20  # CUDA-event samples per benchmark


def clock_for(device: str) -> str:
    """How a benchmark on ``device`` is timed: ``cuda-events`` on a CUDA device, else
    ``timer`` (``torch.utils.benchmark``'s own clock)."""
    return "cuda-events" if torch.device(device).type == "cuda" else "timer"


def event_samples(call: Callable[[], object], number: int, blocks: int = BLOCKS) -> list[float]:
    """Seconds per call, one sample per block of ``number`` calls, timed with CUDA events; the
    device is synchronised before each block (nothing earlier in flight) and after it (its work
    done before the events are read)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(blocks):
        torch.cuda.synchronize()
        start.record()
        for _ in range(number):
            call()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) / 1000.0 / number)  # elapsed_time: milliseconds
    return samples


def entry(measurement: Measurement, samples: list[float] | None = None) -> dict[str, Any]:
    """One benchmark of the JSON shape from one Measurement (its own times unless ``samples``)."""
    parts = [measurement.label, measurement.sub_label, measurement.description]
    return {
        "name": " / ".join(p for p in parts if p) or measurement.stmt,
        "unit": "s",
        "samples": list(measurement.times) if samples is None else samples,
        "iterations": measurement.number_per_run,
    }


def measured(timer: Timer, call: Callable[[], object], device: str) -> dict[str, Any]:
    """One entry: the timer's own samples on the CPU, CUDA events on a CUDA device."""
    measurement = timer.blocked_autorange(min_run_time=0.2)
    if clock_for(device) == "cuda-events":
        return entry(measurement, event_samples(call, measurement.number_per_run))
    return entry(measurement)


def benchmarks(device: str) -> list[dict[str, Any]]:
    a = torch.randn(256, 256, device=device)
    image = torch.randn(8, 3, 64, 64, device=device)
    conv = torch.nn.Conv2d(3, 16, 3).to(device)
    matmul = Timer("a @ a", globals={"a": a}, label="matmul", sub_label="256x256", description=device)
    convolution = Timer(
        "conv(x)",
        globals={"conv": conv, "x": image},
        label="conv2d",
        sub_label="8x3x64x64",
        description=device,
    )
    return [measured(matmul, lambda: a @ a, device), measured(convolution, lambda: conv(image), device)]


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        found = benchmarks(device)
    except Exception as exc:  # reported as an error of the benchmarks, which paritybot shows as such
        found = [{"name": f"torch benchmarks ({device})", "error": repr(exc)}]
    # One JSON line, printed last: whatever the project prints before it is ignored.
    print(json.dumps({"benchmarks": found}))


if __name__ == "__main__":
    main()
