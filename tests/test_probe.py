"""The environment probe: its step, parsing its JSON, and real runs on the host and in a container."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import docker
import pytest
from docker_support import docker_client, test_image

from bot.core.config import Environment
from runner.backends.base import Step, StepResult
from runner.backends.docker import DockerRunner
from runner.backends.host import HostRunner
from runner.probe.probe import PROBE_PATH, parse_probe, probe_source, probe_step
from runner.probe.script import cudnn_version, nccl_version

__all__ = ["docker_client", "test_image"]  # fixtures, imported for pytest
PYTHON3 = shutil.which("python3")


def test_probe_step_injects_the_script_and_passes_package_names():
    step = probe_step(["numpy", "pytest", "numpy", "--evil", ""])
    assert step.name == "probe"
    assert step.argv == ["python3", "-I", PROBE_PATH, "numpy", "pytest"]
    assert step.inject == {PROBE_PATH: probe_source()}
    assert step.scratch  # outside the workspace: see tests/hostile/test_report_and_probe.py
    assert "import json" in probe_source()
    assert step.network is False


def _result(output: str, **kw: object) -> StepResult:
    return StepResult.model_validate({"name": "probe", "exit_code": 0, "output": output, **kw})


def test_probe_json_becomes_env_facts():
    data = {
        "python": "3.11.2",
        "os": "Debian GNU/Linux 12 (bookworm)",
        "libc": "glibc 2.36",
        "torch": "2.3.1+cu121",
        "torch_cuda": "12.1",
        "cuda_available": True,
        "gpu_models": ["NVIDIA H100 80GB HBM3"],
        "packages": {"torch": "2.3.1+cu121", "numpy": "1.26.4"},
        "notes": ["cuda_runtime from nvcc --version"],
        "probe_python": "/usr/bin/python3",
    }
    noise = "sitecustomize: hello\nDeprecationWarning: something\n"
    facts = parse_probe(_result(noise + json.dumps(data) + "\n"))
    assert facts.source == "probe"
    assert facts.python == "3.11.2"
    assert facts.torch == "2.3.1+cu121"
    assert facts.cuda_available is True
    assert facts.gpu_models == ["NVIDIA H100 80GB HBM3"]
    assert facts.packages == {"torch": "2.3.1+cu121", "numpy": "1.26.4"}
    assert "cudnn" in facts.missing and "python" not in facts.missing
    assert facts.notes == ["cuda_runtime from nvcc --version"]


def test_a_bad_value_loses_only_that_field():
    facts = parse_probe(_result(json.dumps({"python": "3.12.1", "gpu_models": "not a list"})))
    assert facts.python == "3.12.1"
    assert facts.gpu_models is None
    assert any("gpu_models" in note for note in facts.notes)


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (_result("Traceback (most recent call last):\n  boom", exit_code=1), "printed no JSON object"),
        (_result("{not json"), "printed no JSON object"),
        (_result("[1, 2]"), "printed no JSON object"),
        (_result("", exit_code=None, timed_out=True), "did not run to the end"),
        (_result("", exit_code=None, error="probe: could not start python3"), "could not start python3"),
    ],
)
def test_a_probe_that_failed_gives_unknown_facts_with_the_reason(result, expected):
    facts = parse_probe(result)
    assert facts.source == "probe"
    assert facts.python is None and "python" in facts.missing
    assert any(expected in note for note in facts.notes)


@pytest.mark.parametrize(("raw", "text"), [(8902, "8.9.2"), (90100, "9.1.0"), (None, None), (0, None)])
def test_cudnn_versions_as_torch_encodes_them(raw, text):
    assert cudnn_version(raw) == text


@pytest.mark.parametrize(
    ("raw", "text"), [([2, 20, 5], "2.20.5"), (2708, "2.7.8"), (21803, "2.18.3"), (None, None)]
)
def test_nccl_versions_as_torch_reports_them(raw, text):
    assert nccl_version(raw) == text


# --- real runs -------------------------------------------------------------------------------------


def _python3(code: str, path: str | None = None) -> str:
    """Run code with the ``python3`` that ``path`` (a PATH value) finds, as a step would."""
    exe = shutil.which("python3", path=path) or PYTHON3
    assert exe, "python3 is not on PATH"
    return subprocess.run([exe, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.skipif(PYTHON3 is None, reason="no python3 on PATH")
async def test_probe_on_the_host_reports_the_host_python(tmp_path):
    runner = HostRunner()
    path = runner.info.env["PATH"]  # the host runner's python3: the one installed beside paritybot
    facts = parse_probe(await runner.run(probe_step(["pip"]), tmp_path))
    assert facts.python == _python3("import platform; print(platform.python_version())", path)
    pip_version = _python3("from importlib.metadata import version; print(version('pip'))", path)
    assert facts.packages.get("pip") == pip_version
    assert facts.platform == _python3("import platform; print(platform.platform())", path)
    if Path("/etc/os-release").exists():
        pretty = next(
            line.split("=", 1)[1].strip().strip('"')
            for line in Path("/etc/os-release").read_text().splitlines()
            if line.startswith("PRETTY_NAME=")
        )
        assert facts.os == pretty
    # Whatever is absent is named, never guessed.
    for tool in ("gcc", "clang", "cmake"):
        assert (getattr(facts, tool) is None) == (tool in facts.missing)
        assert (getattr(facts, tool) is None) == (shutil.which(tool) is None)


def _fake_dist(root: Path, name: str, body: str) -> None:
    """A package named ``name`` whose import does ``body``; its metadata says it is installed."""
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(body)
    dist = root / f"{name}-0.0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.1\n")


def python_with_torch(tmp_path: Path, body: str) -> HostRunner:
    """A host runner whose ``python3`` has a torch installed that does ``body`` on import.

    The probe runs isolated (``python3 -I``: no PYTHONPATH), so the torch must be in the
    interpreter's own site-packages, as in an image: a virtual environment's.
    """
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    _fake_dist(site, "torch", body)
    return HostRunner(env={"PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '')}"})


@pytest.mark.skipif(PYTHON3 is None, reason="no python3 on PATH")
async def test_a_torch_whose_import_hangs_cannot_hang_the_probe(tmp_path):
    runner = python_with_torch(tmp_path, "import time\ntime.sleep(600)\n")
    env = {"PARITYBOT_PROBE_TORCH_TIMEOUT": "2"}
    step = probe_step([]).model_copy(update={"env": env, "timeout_s": 60})
    facts = parse_probe(await runner.run(step, tmp_path))
    assert facts.packages.get("torch") == "0.0.1"
    assert facts.torch is None and "torch" in facts.missing
    assert any("did not finish within 2 s" in note for note in facts.notes)
    assert facts.python is not None  # the rest of the probe still ran


@pytest.mark.skipif(PYTHON3 is None, reason="no python3 on PATH")
async def test_a_broken_torch_is_reported_not_crashed_on(tmp_path):
    runner = python_with_torch(
        tmp_path, "raise ImportError('libcudart.so.12: cannot open shared object file')\n"
    )
    facts = parse_probe(await runner.run(probe_step([]), tmp_path))
    assert facts.torch is None
    assert any("importing it failed" in note and "libcudart.so.12" in note for note in facts.notes)


@pytest.mark.docker
async def test_probe_in_the_container_matches_what_the_image_holds(
    docker_client: docker.DockerClient, test_image: str, tmp_path: Path
):
    env = Environment(name="ci", image=test_image, gpus="none")
    runner = DockerRunner(env, f"t-probe-{uuid.uuid4().hex[:8]}", docker_client)
    try:
        facts = parse_probe(
            await runner.run(probe_step(["pytest", "pre-commit", "pytest-timeout"]), tmp_path)
        )
        # Ask the image by other means: the interpreter itself and pip's own listing.
        asked = await runner.run(
            Step(
                name="ask",
                argv=[
                    "sh",
                    "-c",
                    "python3 -c 'import platform; print(platform.python_version())'; "
                    "python3 -m pip list --format json",
                ],
            ),
            tmp_path,
        )
    finally:
        await runner.close()
    python_line, pip_json = asked.output.strip().split("\n", 1)
    pip = {re.sub(r"[-_.]+", "-", p["name"]).lower(): p["version"] for p in json.loads(pip_json)}
    assert facts.python == python_line
    assert facts.os is not None and facts.os.startswith("Debian GNU/Linux 12")
    assert facts.libc is not None and facts.libc.startswith("glibc ")
    assert facts.packages == {k: pip[k] for k in ("pytest", "pre-commit", "pytest-timeout")}
    assert facts.torch is None and "torch" in facts.missing
    assert "numpy" not in facts.packages
    assert facts.gcc is None and "gcc" in facts.missing  # the minimal image has no compiler
    assert facts.nvidia_driver is None
    assert facts.platform is not None and platform.machine() in facts.platform


def test_the_probe_script_runs_without_site_packages(tmp_path):
    # -S -I: no site-packages, no user site, no PYTHONPATH: only the standard library is importable,
    # as in an image whose Python has nothing installed.
    script = Path(sys.modules["runner.probe.script"].__file__ or "")
    proc = subprocess.run(
        [sys.executable, "-S", "-I", str(script), "requests"], capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["python"] == platform.python_version()
    assert "requests" not in data["packages"]
    assert any("requests" in note for note in data["notes"])
