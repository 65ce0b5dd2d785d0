"""Environment probe: prints ONE JSON object describing the interpreter, OS, GPU stack and tools.

This file is copied into an empty directory outside the workspace and run with ``python3 -I``
(whatever ``python3`` the image, or the host, has), before anything else, so it uses the standard
library only and stays valid on Python 3.8. Its child interpreter runs isolated too: nothing of
the pull request is on either's import path.
Every fact is measured; a tool or package that is absent is named in ``missing`` with a note that
says why, never guessed. The keys match :class:`bot.core.models.EnvFacts`.

Usage: ``python3 probe.py [PACKAGE ...]`` — torch and numpy are always looked up; extra package
names are looked up too.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys

DEFAULT_PACKAGES = ("torch", "numpy")
# Fields the probe fills; a field left None is listed in ``missing`` (same order as EnvFacts).
FIELDS = (
    "torch",
    "torch_cuda",
    "torch_hip",
    "cuda_available",
    "cuda_runtime",
    "cudnn",
    "nccl",
    "nvidia_driver",
    "gpu_models",
    "python",
    "os",
    "libc",
    "gcc",
    "clang",
    "cmake",
    "platform",
)
# Importing torch initialises CUDA; a wedged driver can hang that forever, so it gets a deadline.
TORCH_TIMEOUT_S = float(os.environ.get("PARITYBOT_PROBE_TORCH_TIMEOUT", "120"))
TOOL_TIMEOUT_S = 30.0
_VERSION = re.compile(r"\d+(?:\.\d+)+")

# Run in a child interpreter: prints torch's build facts as JSON. The CUDA runtime that torch
# actually loaded is read from the libcudart mapped into the process, not from the build string.
TORCH_CODE = r"""
import ctypes, json
import torch
out = {"torch": torch.__version__, "torch_cuda": getattr(torch.version, "cuda", None),
       "torch_hip": getattr(torch.version, "hip", None)}
try:
    v = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
except Exception as exc:
    v, out["cudnn_error"] = None, repr(exc)
out["cudnn_raw"] = v
try:
    n = torch.cuda.nccl.version() if torch.cuda.is_available() or torch.version.cuda else None
except Exception as exc:
    n, out["nccl_error"] = None, repr(exc)
out["nccl_raw"] = list(n) if isinstance(n, tuple) else n
try:
    out["cuda_available"] = bool(torch.cuda.is_available())
    if out["cuda_available"]:
        out["gpu_models"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
except Exception as exc:
    out["cuda_available"], out["cuda_error"] = False, repr(exc)
cudart = None
try:
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1] if line.strip() else ""
            if "libcudart.so" in path:
                cudart = path
                break
    if cudart:
        ver = ctypes.c_int()
        if ctypes.CDLL(cudart).cudaRuntimeGetVersion(ctypes.byref(ver)) == 0:
            out["cudart"] = "%d.%d" % (ver.value // 1000, (ver.value % 1000) // 10)
except Exception as exc:
    out["cudart_error"] = repr(exc)
print(json.dumps(out))
"""


def canonical(name: str) -> str:
    """PEP 503 name: what pip and collect_env parsing compare on.

    ``packaging.utils.canonicalize_name`` by hand: this script runs in the CI's image with the
    standard library only (``python3 -I``), where packaging may not be installed.
    """
    return re.sub(r"[-_.]+", "-", name).lower()


def run_tool(argv: list[str], timeout: float = TOOL_TIMEOUT_S) -> tuple[int | None, str]:
    """(exit code, stdout+stderr); exit code None when the tool is absent or hung."""
    if shutil.which(argv[0]) is None:
        return None, f"{argv[0]} not found on PATH"
    try:
        proc = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, f"{argv[0]} did not answer within {timeout:.0f} s"
    except OSError as exc:
        return None, f"{argv[0]} could not run: {exc}"
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


def os_release() -> tuple[str | None, str | None]:
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError:
            continue
        values = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip()] = value.strip().strip("\"'")
        name = values.get("PRETTY_NAME") or " ".join(
            v for v in (values.get("NAME"), values.get("VERSION")) if v
        )
        return (name or None), None
    if sys.platform == "darwin":
        mac = platform.mac_ver()[0]
        return (f"macOS {mac}" if mac else None), None
    return None, "no /etc/os-release"


def libc() -> tuple[str | None, str | None]:
    name, version = platform.libc_ver()
    if name and version:
        return f"{name} {version}", None
    # musl's ldd prints its version on stderr and exits 1; glibc's prints it on stdout.
    code, out = run_tool(["ldd", "--version"])
    if code is None:
        return None, "platform.libc_ver() found nothing and " + out
    first = out.strip().splitlines()[0] if out.strip() else ""
    match = _VERSION.search(out)
    if "musl" in out.lower() and match:
        return f"musl {match.group(0)}", None
    if match and ("glibc" in first.lower() or "gnu libc" in first.lower()):
        return f"glibc {match.group(0)}", None
    return None, f"could not read the C library version from ldd: {first!r}"


def package_versions(names: list[str]) -> tuple[dict[str, str], list[str]]:
    from importlib import metadata

    found: dict[str, str] = {}
    absent: list[str] = []
    for name in names:
        try:
            found[canonical(name)] = metadata.version(name)
        except metadata.PackageNotFoundError:
            absent.append(canonical(name))
    return found, absent


def cudnn_version(raw: object) -> str | None:
    # torch encodes cuDNN 8 as major*1000 + minor*100 + patch and cuDNN 9 as major*10000 + ...
    if not isinstance(raw, int) or raw <= 0:
        return None
    if raw >= 90000:
        return f"{raw // 10000}.{raw % 10000 // 100}.{raw % 100}"
    return f"{raw // 1000}.{raw % 1000 // 100}.{raw % 100}"


def nccl_version(raw: object) -> str | None:
    if isinstance(raw, list) and raw:
        return ".".join(str(p) for p in raw)
    if isinstance(raw, int) and raw > 0:
        # Older torch returns one integer: major*1000 + minor*100 + patch (2.7.8 → 2708),
        # newer NCCL releases use major*10000 + minor*100 + patch (2.18.1 → 21801).
        if raw >= 10000:
            return f"{raw // 10000}.{raw % 10000 // 100}.{raw % 100}"
        return f"{raw // 1000}.{raw % 1000 // 100}.{raw % 100}"
    return None


def torch_facts(facts: dict[str, object], notes: list[str]) -> str | None:
    """Fill torch's fields from a child interpreter; return the loaded libcudart's version."""
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-c", TORCH_CODE],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=TORCH_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        notes.append(f"importing torch did not finish within {TORCH_TIMEOUT_S:.0f} s")
        return None
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        notes.append("torch is installed but importing it failed: " + (err[-1] if err else "no message"))
        return None
    try:
        data = json.loads(proc.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        notes.append("torch imported but its facts could not be read")
        return None
    for key in ("torch", "torch_cuda", "torch_hip", "cuda_available"):
        facts[key] = data.get(key)
    facts["cudnn"] = cudnn_version(data.get("cudnn_raw"))
    facts["nccl"] = nccl_version(data.get("nccl_raw"))
    if data.get("gpu_models"):
        facts["gpu_models"] = data["gpu_models"]
    for key in ("cudnn_error", "nccl_error", "cuda_error", "cudart_error"):
        if data.get(key):
            notes.append(f"torch: {key.split('_')[0]}: {data[key]}")
    cudart = data.get("cudart")
    return cudart if isinstance(cudart, str) else None


def nvidia_smi(facts: dict[str, object], notes: list[str]) -> None:
    code, out = run_tool(["nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader"])
    if code is None:
        notes.append(out)
        return
    if code != 0:
        notes.append(f"nvidia-smi failed (exit {code}): {out.strip()[:300]}")
        return
    rows = [line.split(",", 1) for line in out.strip().splitlines() if "," in line]
    if not rows:
        notes.append("nvidia-smi listed no GPU")
        return
    facts["nvidia_driver"] = rows[0][0].strip()
    # nvidia-smi sees every GPU the machine exposes to us; it wins over torch's visible subset.
    facts["gpu_models"] = [name.strip() for _, name in rows]


def cuda_runtime(torch_cudart: str | None, notes: list[str]) -> str | None:
    code, out = run_tool(["nvcc", "--version"])
    if code == 0:
        match = re.search(r"release (\d+\.\d+)", out)
        if match:
            notes.append("cuda_runtime from nvcc --version")
            return match.group(1)
    if torch_cudart:
        notes.append("cuda_runtime from the libcudart torch loaded")
        return torch_cudart
    env = os.environ.get("CUDA_VERSION")
    if env:
        notes.append("cuda_runtime from the CUDA_VERSION environment variable")
        match = _VERSION.match(env)
        return match.group(0) if match else env
    notes.append("no CUDA runtime found (no nvcc, no libcudart loaded by torch, no CUDA_VERSION)")
    return None


def tool_version(argv: list[str], pattern: str, notes: list[str]) -> str | None:
    code, out = run_tool(argv)
    if code is None:
        notes.append(out)
        return None
    match = re.search(pattern, out)
    if code != 0 or not match:
        notes.append(f"{' '.join(argv)} gave no version (exit {code})")
        return None
    return match.group(1)


def probe(extra_packages: list[str]) -> dict[str, object]:
    facts: dict[str, object] = {key: None for key in FIELDS}
    notes: list[str] = []
    facts["python"] = platform.python_version()
    facts["platform"] = platform.platform()
    facts["os"], why = os_release()
    notes.extend([why] if why else [])
    facts["libc"], why = libc()
    notes.extend([why] if why else [])

    names = list(dict.fromkeys([*DEFAULT_PACKAGES, *extra_packages]))
    packages, absent = package_versions(names)
    if absent:
        notes.append("not installed: " + ", ".join(absent))
    cudart = torch_facts(facts, notes) if "torch" in packages else None

    nvidia_smi(facts, notes)
    facts["cuda_runtime"] = cuda_runtime(cudart, notes)
    facts["gcc"] = tool_version(["gcc", "-dumpfullversion", "-dumpversion"], r"^(\d+(?:\.\d+)*)", notes)
    facts["clang"] = tool_version(["clang", "--version"], r"version (\d+(?:\.\d+)+)", notes)
    facts["cmake"] = tool_version(["cmake", "--version"], r"version (\d+(?:\.\d+)+\S*)", notes)

    facts["packages"] = packages
    facts["missing"] = [key for key in FIELDS if facts[key] in (None, [], "")]
    facts["notes"] = notes
    facts["probe_python"] = sys.executable
    return facts


def main(argv: list[str]) -> int:
    print(json.dumps(probe(argv), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
