"""PyTorch benchmarks: CUDA work timed with CUDA events, the device synchronised around it.

No GPU is needed here: which clock a benchmark gets is a pure decision, tested on its own, and the
CPU path runs for real when PyTorch is installed (it is not among the test dependencies; these
tests are skipped without it). The CUDA branch itself runs only on a machine with a GPU.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest
from test_perf_driver import make_plan, run_perf, write_tree

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "torch_benchmarks.py"


def load_example():
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("torch_benchmarks", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("device", "clock"), [("cuda", "cuda-events"), ("cuda:1", "cuda-events"), ("cpu", "timer")]
)
def test_a_benchmark_on_a_cuda_device_is_timed_with_cuda_events(device, clock):
    assert load_example().clock_for(device) == clock


async def test_torch_benchmarks_on_the_cpu_print_what_the_driver_compares(tmp_path):
    load_example()
    for side in ("base", "head"):
        (tmp_path / side / "benchmarks").mkdir(parents=True)
        shutil.copy(EXAMPLE, tmp_path / side / "benchmarks" / "torch_benchmarks.py")
    command = {"kind": "command", "argv": [sys.executable, "benchmarks/torch_benchmarks.py"], "rounds": 2}

    report = await run_perf(tmp_path, make_plan([command], warmup=0))

    assert not report.errors
    assert [b.name for b in report.benchmarks] == ["matmul / 256x256 / cpu", "conv2d / 8x3x64x64 / cpu"]
    assert all(b.error is None and len(b.rounds) == 2 for b in report.benchmarks)


TORCH_PYTEST = """
    import torch

    A = torch.randn(64, 64)

    def test_matmul(benchmark):
        benchmark(torch.mm, A, A)
    """


async def test_a_pytest_benchmark_with_torch_on_the_cpu_is_read_on_the_cpu_clock(tmp_path):
    pytest.importorskip("torch")
    for side in ("base", "head"):
        write_tree(tmp_path / side, {"tests/test_torch.py": TORCH_PYTEST})

    report = await run_perf(tmp_path, make_plan([{"kind": "pytest", "args": ["tests"]}]))

    (bench,) = report.benchmarks
    assert bench.error is None
    # torch is imported but CUDA never initialised: not the CUDA clock, and one CPU computes.
    assert bench.clock == "cpu"
