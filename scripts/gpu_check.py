#!/usr/bin/env python3
"""Check this machine's GPU stack the way a run would see it, through the host runner.

    python scripts/gpu_check.py [--python PATH] [--json]

On a machine with an NVIDIA GPU: runs the environment probe, then a tiny CUDA test (a matrix
product on the GPU compared with the CPU when torch is installed, else an ``nvidia-smi`` query),
prints what it found and exits 1 if the CUDA test failed. Without a GPU it prints "no GPU" with
the reason and exits 0, so it is safe to call anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# Run as a script from a checkout: the project root must be importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.core.models import EnvFacts
from runner.backends.base import Step, StepResult
from runner.backends.host import HostRunner
from runner.probe.probe import parse_probe, probe_step

MATMUL = """
import torch
assert torch.cuda.is_available(), "torch.cuda.is_available() is False"
torch.manual_seed(0)
a = torch.randn(512, 512, dtype=torch.float64)
b = torch.randn(512, 512, dtype=torch.float64)
gpu = (a.cuda() @ b.cuda()).cpu()
err = (gpu - a @ b).abs().max().item()
print(f"matmul on {torch.cuda.get_device_name(0)}: max abs error vs CPU {err:.3e}")
assert err < 1e-8, f"GPU result differs from the CPU's by {err}"
"""


def find_gpu() -> str | None:
    """Why there is no usable NVIDIA GPU, or None when nvidia-smi lists at least one."""
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi is not installed"
    try:
        proc = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return "nvidia-smi did not answer within 30 s"
    if proc.returncode != 0:
        return f"nvidia-smi failed: {(proc.stdout + proc.stderr).strip()[:200]}"
    if "GPU" not in proc.stdout:
        return "nvidia-smi lists no GPU"
    return None


def cuda_test(facts: EnvFacts, python: str) -> Step:
    if facts.torch:
        return Step(name="cuda-matmul", argv=[python, "-c", MATMUL], timeout_s=300)
    return Step(
        name="nvidia-smi",
        argv=["nvidia-smi", "--query-gpu=name,driver_version,memory.total,utilization.gpu", "--format=csv"],
        timeout_s=60,
    )


async def check(python: str) -> tuple[EnvFacts, StepResult]:
    runner = HostRunner(reason="gpu_check")
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        step = probe_step(["torch", "numpy"])
        step = step.model_copy(update={"argv": [python, *step.argv[1:]]})
        facts = parse_probe(await runner.run(step, Path(tmp)))
        result = await runner.run(cuda_test(facts, python), Path(tmp))
    await runner.close()
    return facts, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="interpreter to probe (default: this one)")
    parser.add_argument("--json", action="store_true", help="print the probe's facts as JSON")
    args = parser.parse_args(argv)
    why_not = find_gpu()
    if why_not:
        print(f"no GPU: {why_not}")
        return 0
    facts, result = asyncio.run(check(args.python))
    if args.json:
        print(facts.model_dump_json(indent=2))
    else:
        for field in ("nvidia_driver", "gpu_models", "cuda_runtime", "torch", "torch_cuda", "cudnn", "nccl"):
            print(f"{field:<14}{getattr(facts, field)}")
        print(f"{'python':<14}{facts.python} ({args.python})")
        for note in facts.notes:
            print(f"note: {note}")
    print(f"--- {result.name}: {'ok' if result.ok else result.describe_failure()}")
    print(result.output.strip())
    if not result.ok:
        print(json.dumps({"failed": result.name, "exit_code": result.exit_code}))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
