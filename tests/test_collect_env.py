"""Parsing contributors' ``python -m torch.utils.collect_env`` pastes.

The table below was written by reading each vendored file in tests/fixtures/collect_env/ (real
pastes from public GitHub issues, see SOURCES.tsv there); one expectation dict per file.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from bot.cli.env import env_parse_main
from bot.core.collect_env import extract_collect_env, parse_collect_env, parse_pr_body

FIXTURES = Path(__file__).parent / "fixtures" / "collect_env"

NO_CUDA_FIELDS = ["cuda_runtime", "cudnn", "nccl", "nvidia_driver", "gpu_models"]

EXPECTED: dict[str, dict[str, Any]] = {
    "01.txt": {
        "torch": "1.3.0",
        "torch_cuda": "10.1.243",
        "torch_hip": None,
        "cuda_available": False,
        "cuda_runtime": "10.0.130",
        "cudnn": None,
        "nvidia_driver": "410.104",
        "gpu_models": ["Tesla T4"],
        "python": "3.7",
        "os": "Debian GNU/Linux 9.11 (stretch)",
        "gcc": "6.3.0",
        "missing": ["torch_hip", "cudnn", "nccl", "libc", "clang", "cmake", "platform"],
        # [pip3] torch==1.2.0 wins over [conda] pytorch 1.3.0 (a different package name anyway)
        "packages": {"torch": "1.2.0", "pytorch": "1.3.0", "numpy": "1.15.1", "mkl-fft": "1.0.14"},
        "notes": ["pip lists torch 1.2.0 but the interpreter imported 1.3.0"],
    },
    "02.txt": {
        "torch": "1.5.0+cu101",
        "torch_cuda": "10.1",
        "torch_hip": None,
        "cuda_available": True,
        "cuda_runtime": "10.1.243",
        "cudnn": None,
        "nvidia_driver": "426.25",
        "gpu_models": ["Quadro P1000"],
        "python": "3.7",
        "os": None,
        "cmake": "3.15.3",
        "missing": ["torch_hip", "cudnn", "nccl", "os", "libc", "gcc", "clang", "platform", "packages"],
        "packages": {},
    },
    "03.txt": {
        "torch": "1.0.0",
        "torch_cuda": "9.0",
        "torch_hip": None,
        "cuda_available": True,
        "cuda_runtime": None,
        "cudnn": None,
        "nvidia_driver": "398.36",
        "gpu_models": ["GeForce GTX 1050"],
        "python": "3.7",
        "os": "Microsoft Windows 10 Enterprise",
        "missing": [
            "torch_hip",
            "cuda_runtime",
            "cudnn",
            "nccl",
            "libc",
            "gcc",
            "clang",
            "cmake",
            "platform",
        ],
        "packages": {"numpy": "1.16.5", "torch": "1.0.0", "torchvision": "0.2.2", "pytorch": "1.0.0"},
    },
    "04.txt": {
        "torch": "1.4.0",
        "torch_cuda": "10.0",
        "torch_hip": None,
        "cuda_available": False,
        "cuda_runtime": None,
        "cudnn": None,
        "nvidia_driver": "410.129",
        "gpu_models": ["TITAN Xp", "TITAN Xp"],
        "python": "3.7",
        "os": "Ubuntu 16.04.6 LTS",
        "gcc": "7.4.0",
        "cmake": "3.17.0-rc1",
        "missing": ["torch_hip", "cuda_runtime", "cudnn", "nccl", "libc", "clang", "platform"],
        "packages": {"numpy": "1.17.1", "pytorch": "1.4.0", "mkl": "2020.0"},
    },
    "06.txt": {
        "torch": "1.3.1",
        "torch_cuda": None,
        "torch_hip": None,
        "cuda_available": False,
        "cuda_runtime": "10.1.105",
        "cudnn": "7.6.5",  # two paths, both libcudnn.so.7.6.5
        "nvidia_driver": "430.64",
        "gpu_models": ["GeForce RTX 2080 Ti"],
        "python": "3.7",
        "os": "Ubuntu 18.04.4 LTS",
        "gcc": "7.5.0",
        "cmake": "3.10.2",
        "missing": ["torch_cuda", "torch_hip", "nccl", "libc", "clang", "platform"],
        "packages": {"numpy": "1.19.1", "torch": "1.3.1", "torchvision": "0.4.2"},
    },
    "07.txt": {
        "torch": "1.8.0a0+c068180",
        "torch_cuda": None,
        "torch_hip": None,
        "cuda_available": False,
        "cuda_runtime": None,
        "cudnn": None,
        "nvidia_driver": None,
        "gpu_models": None,
        "python": "3.9",
        "os": "macOS 11.1 (arm64)",
        "clang": "12.0.0",
        "cmake": "3.19.2",
        "missing": ["torch_cuda", "torch_hip", *NO_CUDA_FIELDS, "libc", "gcc", "platform"],
        "packages": {"torch": "1.8.0a0", "torchvision": "0.9.0a0+83171d6", "numpy": "1.19.4"},
    },
    "08.txt": {
        "torch": "2.10.0.dev20251008",
        "torch_cuda": None,
        "torch_hip": None,
        "cuda_available": False,
        "cuda_runtime": None,
        "cudnn": None,
        "nvidia_driver": None,
        "gpu_models": None,
        "python": "3.11.9",
        "os": "macOS 13.7.4 (arm64)",
        "clang": "17.0.6",
        "cmake": "3.29.3",
        "platform": "macOS-13.7.4-arm64-arm-64bit",
        "missing": ["torch_cuda", "torch_hip", *NO_CUDA_FIELDS, "libc", "gcc"],
        "packages": {"numpy": "2.3.3", "torchaudio": "2.8.0.dev20251008"},
    },
    "09.txt": {
        "torch": "1.9.0+rocm4.2",
        "torch_cuda": None,
        "torch_hip": "4.2.21155-37cb3a34",
        "cuda_available": True,
        "cuda_runtime": None,
        "cudnn": None,
        "nvidia_driver": None,
        "gpu_models": ["Vega 20"],
        "python": "3.6",
        "os": "Scientific Linux release 7.9 (Nitrogen) (x86_64)",
        "libc": "glibc-2.3.4",
        "gcc": "4.8.5",
        "platform": "Linux-3.10.0-1160.25.1.el7.x86_64-x86_64-with-redhat-7.9-Nitrogen",
        "missing": ["torch_cuda", "cuda_runtime", "cudnn", "nccl", "nvidia_driver", "clang", "cmake"],
        "packages": {"torch": "1.9.0+rocm4.2", "torchvision": "0.10.0"},
        "notes": ["HIP runtime 3.27.5", "MIOpen 2.11.0"],
    },
    "11.txt": {
        "torch": "2.1.2+rocm6.1.3",
        "torch_cuda": None,
        "torch_hip": "6.1.40093-bd86f1708",
        "cuda_available": True,
        "cuda_runtime": None,
        "cudnn": None,
        "nvidia_driver": None,
        "gpu_models": ["AMD Radeon RX 6800 XT"],
        "python": "3.10.12",
        "os": "Ubuntu 22.04.4 LTS (x86_64)",
        "libc": "glibc-2.35",
        "gcc": "11.4.0",
        "missing": [
            "torch_cuda",
            "cuda_runtime",
            "cudnn",
            "nccl",
            "nvidia_driver",
            "clang",
            "cmake",
            "packages",
        ],
        "packages": {},
        "notes": ["stops before 'Versions of relevant libraries'"],
    },
    "12.txt": {
        "torch": "2.12.0a0+rocm7.13.0a20260313",
        "torch_cuda": None,
        "torch_hip": "7.2.0",
        "cuda_available": True,
        "cuda_runtime": None,
        "cudnn": None,
        "nvidia_driver": None,
        "gpu_models": ["AMD Radeon(TM) 8050S Graphics (gfx1151)"],
        "python": "3.12.10",
        "os": "Microsoft Windows 11 Pro (10.0.26200 64-Bit)",
        "libc": None,
        "platform": "Windows-11-10.0.26200-SP0",
        "missing": [
            "torch_cuda",
            "cuda_runtime",
            "cudnn",
            "nccl",
            "nvidia_driver",
            "libc",
            "gcc",
            "clang",
            "cmake",
        ],
        "packages": {"numpy": "2.4.4", "torchvision": "0.26.0a0+rocm7.13.0a20260313"},
        "notes": ["HIP runtime 7.2.0", "MIOpen 3.5.1"],
    },
    "14.txt": {
        "torch": "2.5.1",
        "torch_cuda": None,
        "torch_hip": None,
        "cuda_available": False,
        "cuda_runtime": None,
        "cudnn": None,
        "nvidia_driver": None,
        "gpu_models": None,
        "python": "3.12.8",
        "os": "macOS 14.7.2 (arm64)",
        "clang": "16.0.0",
        "platform": "macOS-14.7.2-arm64-arm-64bit",
        "missing": ["torch_cuda", "torch_hip", *NO_CUDA_FIELDS, "libc", "gcc", "cmake"],
        "packages": {"torch": "2.5.1", "pytorch": "2.5.1", "torchvision": "0.20.1", "numpy": "2.2.2"},
    },
    "15.txt": {
        "torch": "0.5.0a0+152762a",
        "torch_cuda": "9.2.148",
        "torch_hip": None,
        "cuda_available": True,
        "cuda_runtime": "9.2.148",
        "cudnn": "7.2.1",  # libcudnn.so.7.2.1 and an unversioned libcudnn_static.a
        "nvidia_driver": "396.45",
        "gpu_models": ["GeForce GTX 1080"],
        "python": "3.6",
        "os": "Fedora release 28 (Twenty Eight)",
        "gcc": "7.3.0",
        "cmake": "3.11.2",
        "missing": ["torch_hip", "nccl", "libc", "clang", "platform", "packages"],
        "packages": {},
        "notes": ["stops before 'Versions of relevant libraries'"],
    },
    "16.txt": {
        "torch": "0.5.0a0+72f91b1",
        "torch_cuda": None,
        "torch_hip": None,
        "cuda_available": False,
        "cuda_runtime": None,
        "cudnn": None,
        "nvidia_driver": None,
        "gpu_models": None,
        "python": "3.6",
        "os": "Mac OSX 10.13.3",
        "cmake": "3.12.0",
        "missing": ["torch_cuda", "torch_hip", *NO_CUDA_FIELDS, "libc", "gcc", "clang", "platform"],
        # legacy "[pip] numpy (1.15.0)" form; pip's torch wins over the seven stale conda rows
        "packages": {"numpy": "1.15.0", "torch": "0.5.0a0+e449a27", "torchfile": "0.1.0"},
        "notes": ["debug build of PyTorch"],
    },
    "17.txt": {
        "torch": "1.0.0",
        "torch_cuda": "9.0.176",
        "torch_hip": None,
        "cuda_available": True,
        "cuda_runtime": "9.0.225",
        "cudnn": "one of 7.0.4, 7.0.5",
        "nvidia_driver": "390.48",
        "gpu_models": ["GeForce GTX 1080 Ti"] * 3,
        "python": "2.7",
        "os": "Ubuntu 16.04.4 LTS",
        "gcc": "5.5.0",
        "cmake": "3.5.2",
        "missing": ["torch_hip", "nccl", "libc", "clang", "platform"],
        "packages": {"numpy": "1.14.5", "torch": "1.0.0", "pytorch": "1.0.0", "mkl": "2018.0.3"},
        "notes": ["cuDNN: several libraries found (7.0.4, 7.0.5)"],
    },
    "18.txt": {
        "torch": "1.2.0.dev20190605",
        "torch_cuda": "9.0.176",
        "torch_hip": None,
        "cuda_available": True,
        "cuda_runtime": "9.2.88",
        "cudnn": None,
        "nvidia_driver": "396.26",
        "gpu_models": ["Tesla P100-PCIE-16GB", "Tesla P100-PCIE-16GB"],
        "python": "3.7",
        "os": "CentOS Linux release 7.5.1804 (Core)",
        "gcc": "4.8.5",
        "cmake": "3.14.4",
        "missing": ["torch_hip", "cudnn", "nccl", "libc", "clang", "platform"],
        "packages": {"pytorch-nightly": "1.2.0.dev20190605", "torch": "1.2.0.dev20190605"},
    },
    "20.txt": {
        "torch": "1.7.0.dev20200922+cpu",
        "torch_cuda": None,
        "torch_hip": None,
        "cuda_available": False,
        "cuda_runtime": None,
        "cudnn": None,
        "nvidia_driver": None,
        "gpu_models": None,
        "python": "3.7",
        "os": "CentOS Linux 7 (Core) (x86_64)",
        "gcc": "4.8.5",
        "missing": ["torch_cuda", "torch_hip", *NO_CUDA_FIELDS, "libc", "clang", "cmake", "platform"],
        "packages": {"torch": "1.7.0.dev20200922+cpu", "torchvision": "0.7.0+cpu"},
    },
    "21.txt": {
        "torch": "1.7.0+cu101",
        "torch_cuda": "10.1",
        "torch_hip": None,
        "cuda_available": True,
        "cuda_runtime": None,
        "cudnn": None,
        "nvidia_driver": "455.32.00",
        "gpu_models": ["Quadro RTX 6000"],
        "python": "3.7",
        "os": "Ubuntu 20.04.1 LTS (x86_64)",
        "gcc": "9.3.0",
        "clang": "10.0.0",
        "cmake": "3.16.3",
        "missing": ["torch_hip", "cuda_runtime", "cudnn", "nccl", "libc", "platform"],
        "packages": {"cudatoolkit": "10.2.89", "pytorch-memlab": "0.2.2", "torch": "1.7.0+cu101"},
    },
    "23.txt": {
        "torch": "1.11.0+cu115",
        "torch_cuda": "11.5",
        "torch_hip": None,
        "cuda_available": True,
        "cuda_runtime": "11.1.105",
        "cudnn": "8.4.0",
        "nvidia_driver": "510.73.08",
        "gpu_models": ["NVIDIA RTX A5000"] * 8,
        "python": "3.7.13",
        "os": "Ubuntu 18.04.6 LTS (x86_64)",
        "libc": "glibc-2.17",
        "gcc": "7.5.0",
        "clang": "6.0.0",
        "cmake": "3.20.1",
        "missing": ["torch_hip", "nccl"],
        "packages": {"numpy-quaternion": "2020.11.2.17.0.49", "numpy": "1.21.0", "mypy": "0.812"},
    },
    "24.txt": {
        "torch": "1.14.0.dev20221104",
        "torch_cuda": None,
        "torch_hip": None,
        "cuda_available": False,
        "cuda_runtime": None,
        "cudnn": None,
        "nvidia_driver": None,
        "gpu_models": None,
        "python": "3.10.8",
        "os": "macOS 13.0 (arm64)",
        "cmake": "3.24.2",
        "missing": ["torch_cuda", "torch_hip", *NO_CUDA_FIELDS, "libc", "gcc", "clang"],
        # pip's numpy 1.23.2 wins over conda's 1.21.5
        "packages": {"numpy": "1.23.2", "pytorch": "1.13.0.dev20220826", "torch": "1.14.0.dev20221104"},
    },
    "25.txt": {
        "torch": "2.0.0.dev20230228+cpu-cxx11-abi",
        "torch_cuda": None,
        "torch_hip": None,
        "cuda_available": False,
        "cuda_runtime": None,
        "cudnn": None,
        "nvidia_driver": None,
        "gpu_models": None,
        "python": "3.9.16",
        "os": "CentOS Stream 8 (x86_64)",
        "libc": "glibc-2.28",
        "gcc": "8.5.0",
        "cmake": "3.20.2",
        "missing": ["torch_cuda", "torch_hip", *NO_CUDA_FIELDS, "clang"],
        "packages": {
            "torch": "2.0.0.dev20230228+cpu.cxx11.abi",
            "intel-extension-for-pytorch": "2.0.0+git2cb04e0",
        },
    },
    "26.txt": {
        "torch": "2.11.0+cu130",
        "torch_cuda": "13.0",
        "torch_hip": None,
        "cuda_available": False,
        "cuda_runtime": None,
        "cudnn": None,
        "nccl": "2.28.9",  # [pip3] nvidia-nccl-cu13==2.28.9
        "nvidia_driver": None,
        "gpu_models": None,
        "python": "3.10.12",
        "os": "Ubuntu 22.04.5 LTS (x86_64)",
        "libc": "glibc-2.35",
        "gcc": "11.4.0",
        "clang": "15.0.0",
        "cmake": "3.22.1",
        "missing": ["torch_hip", "cuda_runtime", "cudnn", "nvidia_driver", "gpu_models"],
        "packages": {"torch": "2.11.0", "triton": "3.6.0", "nvidia-cudnn-cu13": "9.19.0.56"},
        "notes": ["CUDA build, but CUDA was not available"],
    },
    "27.txt": {
        "torch": "2.13.0.dev20260518+cu130",
        "torch_cuda": "13.0",
        "torch_hip": None,
        "cuda_available": True,
        "cuda_runtime": "12.8.93",
        "cudnn": None,
        "nccl": "2.29.7",  # cu12 2.27.5 and cu13 2.29.7 side by side; torch is a cu130 build
        "nvidia_driver": "580.126.09",
        "gpu_models": ["NVIDIA H100"],
        "python": "3.13.12",
        "os": "CentOS Stream 9 (x86_64)",
        "libc": "glibc-2.34",
        "gcc": "11.5.0",
        "missing": ["torch_hip", "cudnn", "clang", "cmake"],
        "packages": {"mypy-extensions": "1.1.0", "torch": "2.13.0.dev20260517+cu130", "onnx-ir": "0.2.1"},
        "notes": ["nvidia-nccl-cu12==2.27.5", "pip lists torch 2.13.0.dev20260517+cu130"],
    },
    "30.txt": {
        "torch": "2.5.1",
        "torch_cuda": None,
        "torch_hip": None,
        "cuda_available": None,
        "cuda_runtime": None,
        "cudnn": None,
        "nvidia_driver": None,
        "gpu_models": None,
        "python": "3.10.16",
        "os": "Ubuntu 22.04.5 LTS (aarch64)",
        "libc": "glibc-2.35",
        "gcc": "11.4.0",
        "cmake": "3.22.1",
        "missing": ["torch_cuda", "torch_hip", "cuda_available", *NO_CUDA_FIELDS, "clang"],
        "packages": {"torch-npu": "2.5.1.dev20250308", "transformers": "4.50.0.dev0", "pyzmq": "26.3.0"},
        "notes": ["vLLM Version: 0.7.3", "vLLM Ascend Version: 0.7.3rc1"],
    },
    "32.txt": {
        "torch": "1.12.0a0+2c916ef.nv22.3",
        "torch_cuda": "11.4",
        "torch_hip": None,
        "cuda_available": True,
        "cuda_runtime": "11.4.239",
        "cudnn": "8.4.1",
        "nvidia_driver": None,
        "gpu_models": None,
        "python": "3.8.10",
        "os": "Ubuntu 20.04.5 LTS (aarch64)",
        "libc": "glibc-2.31",
        "gcc": "9.4.0",
        "cmake": "3.16.3",
        "missing": ["torch_hip", "nccl", "nvidia_driver", "gpu_models", "clang"],
        "packages": {"numpy": "1.17.4", "torchaudio": "0.12.0"},
        "notes": ["the paste may stop early"],
    },
    "33.txt": {
        "torch": "2.0.1+cu117",
        "torch_cuda": "11.7",
        "torch_hip": None,
        "cuda_available": True,
        "cuda_runtime": "11.7.64",
        "cudnn": "8",  # ...\\cudnn_ops_train64_8.dll tells the major version only
        "nvidia_driver": "535.98",
        "gpu_models": ["NVIDIA GeForce GTX 1050 Ti"],
        "python": "3.9.16",
        "os": "Microsoft Windows 11 Pro",
        "platform": "Windows-10-10.0.22621-SP0",
        "missing": ["torch_hip", "nccl", "libc", "gcc", "clang", "cmake"],
        "packages": {"torch": "2.0.1+cu117", "torchaudio": "2.0.2+cu117"},
        "notes": ["the paste may stop early"],
    },
    "34.txt": {
        "torch": "1.7.1",
        "torch_cuda": None,
        "torch_hip": None,
        "cuda_available": False,
        "cuda_runtime": None,
        "cudnn": None,
        "nvidia_driver": None,
        "gpu_models": None,
        "python": "3.7",
        "os": "macOS 11.1 (x86_64)",
        "clang": "12.0.0",
        "cmake": "3.19.2",
        "missing": ["torch_cuda", "torch_hip", *NO_CUDA_FIELDS, "libc", "gcc", "platform"],
        "packages": {"tensorflow": "1.14.0", "torchtext": "0.6.0", "pytorch": "1.7.1"},
    },
    "35.txt": {
        "torch": "1.9.0+cu111",
        "torch_cuda": "11.1",
        "torch_hip": None,
        "cuda_available": False,
        "cuda_runtime": "11.1.105",
        "cudnn": None,
        "nvidia_driver": None,
        "gpu_models": None,
        "python": "3.6",
        "os": "CentOS Linux 7 (Core) (x86_64)",
        "libc": "glibc-2.3.4",
        "gcc": "8.3.1",
        "missing": ["torch_hip", "cudnn", "nccl", "nvidia_driver", "gpu_models", "clang", "cmake"],
        "packages": {"torch": "1.9.0+cu111", "torchvision": "0.10.0+cu111"},
    },
}
# The three issue bodies hold the same outputs as these files (see the fixtures' README).
EXPECTED["body_01.md"] = EXPECTED["12.txt"]
EXPECTED["body_03.md"] = EXPECTED["30.txt"]
EXPECTED["body_05.md"] = {**EXPECTED["06.txt"]}


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def _check(facts: Any, expected: dict[str, Any]) -> None:
    assert facts is not None
    assert facts.source == "collect_env"
    for key, value in expected.items():
        if key == "packages":
            for name, version in value.items():
                assert facts.packages.get(name) == version, name
            if not value:
                assert facts.packages == {}
        elif key == "notes":
            for fragment in value:
                assert any(fragment in note for note in facts.notes), (fragment, facts.notes)
        else:
            assert getattr(facts, key) == value, key


def test_every_vendored_file_has_an_expectation() -> None:
    on_disk = {p.name for p in FIXTURES.iterdir() if p.suffix in {".txt", ".md"} and p.name != "README.md"}
    assert on_disk == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_parses_each_real_paste(name: str) -> None:
    _check(parse_pr_body(_fixture(name)), EXPECTED[name])


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if n.endswith(".txt")))
def test_parse_collect_env_reads_the_raw_file_too(name: str) -> None:
    _check(parse_collect_env(_fixture(name)), EXPECTED[name])


@pytest.mark.parametrize("name", ["04.txt", "06.txt", "17.txt", "27.txt", "body_03.md"])
def test_crlf_tabs_and_quoting_do_not_change_the_result(name: str) -> None:
    text = _fixture(name)
    crlf = text.replace("\n", "\r\n")
    tabbed = "\n".join("\t" + line for line in text.splitlines())
    quoted = "\n".join("> " + line for line in text.splitlines())
    for variant in (crlf, tabbed, quoted):
        _check(parse_pr_body(variant), EXPECTED[name])


# --- finding the paste ------------------------------------------------------------------------------


def test_extract_cuts_the_unbalanced_fence_and_the_echoed_command() -> None:
    text = extract_collect_env(_fixture("body_01.md"))
    assert text is not None
    assert text.startswith("Collecting environment information...")
    assert text.rstrip().endswith("[conda] Could not collect")
    assert "RuntimeWarning" not in text


def test_extract_reads_a_paste_stuffed_into_summary() -> None:
    text = extract_collect_env(_fixture("body_03.md"))
    assert text is not None
    assert text.startswith("Collecting environment information...")
    assert text.endswith("path=/usr/local/Ascend/ascend-toolkit/8.0.0/aarch64-linux")


def test_extract_stops_at_the_closing_backtick_line() -> None:
    text = extract_collect_env(_fixture("body_05.md"))
    assert text is not None
    assert "import torch" not in text
    assert text.rstrip().endswith("[pip3] torchvision==0.4.2")


def test_paste_in_details_and_fence_among_pr_prose() -> None:
    body = (
        "## Summary\nFixes the fused kernel on Hopper.\n\n"
        "<details><summary>Environment</summary>\n\n```text\n"
        + _fixture("27.txt")
        + "```\n</details>\n\n### Test plan\nPyTorch version: 9.9.9 is mentioned here in prose.\n"
    )
    facts = parse_pr_body(body)
    _check(facts, EXPECTED["27.txt"])


def test_bare_paste_without_header_after_prose() -> None:
    body = "Repro below.\n\nEnvironment:\n" + _fixture("03.txt") + "\nThanks!\n"
    _check(parse_pr_body(body), EXPECTED["03.txt"])


@pytest.mark.parametrize(
    "body",
    [
        "",
        "Fixes #123. Adds a test for the CUDA path.",
        "- PyTorch Version (e.g., 1.0): 2.3\n- OS (e.g., Linux): Ubuntu\n- CUDA/cuDNN version: 12.1",
        "OS: Linux\nPython version: 3.11\n",  # hand-written, nothing torch-specific
        "```\nCollecting environment information...\n```",
    ],
)
def test_no_paste_gives_none(body: str) -> None:
    assert extract_collect_env(body) is None
    assert parse_pr_body(body) is None


def test_a_second_paste_is_ignored_and_noted() -> None:
    facts = parse_collect_env(_fixture("02.txt") + "\n" + _fixture("27.txt"))
    _check(facts, EXPECTED["02.txt"])
    assert any("more than one collect_env output" in note for note in facts.notes)


# --- values the samples do not cover --------------------------------------------------------------

MODERN_CUDA = """Collecting environment information...
PyTorch version: 2.3.0+cu121
Is debug build: False
CUDA used to build PyTorch: 12.1
ROCM used to build PyTorch: N/A

OS: Ubuntu 22.04.4 LTS (x86_64)
GCC version: (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0
Clang version: Could not collect
CMake version: version 3.29.2
Libc version: glibc-2.35

Python version: 3.10.12 (main, Nov 20 2023, 15:14:05) [GCC 11.4.0] (64-bit runtime)
Python platform: Linux-5.15.0-105-generic-x86_64-with-glibc2.35
Is CUDA available: True
CUDA runtime version: 12.1.105
CUDA_MODULE_LOADING set to: LAZY
GPU models and configuration:
GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5d1e2c3b-aaaa-bbbb-cccc-0123456789ab)
  MIG 3g.40gb     Device  0: (UUID: MIG-0f1e2d3c-aaaa-bbbb-cccc-0123456789ab)
GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-6e2f3d4c-aaaa-bbbb-cccc-0123456789ab)

Nvidia driver version: 535.161.08
cuDNN version: Probably one of the following:
/usr/lib/x86_64-linux-gnu/libcudnn.so.8
/usr/lib/x86_64-linux-gnu/libcudnn.so.8.9.2
/usr/lib/x86_64-linux-gnu/libcudnn_ops_infer.so.8.9.2
HIP runtime version: N/A
MIOpen runtime version: N/A
Is XNNPACK available: True

Versions of relevant libraries:
[pip3] numpy==1.26.4
[pip3] nvidia-nccl-cu12==2.20.5
[pip3] torch==2.3.0+cu121
[conda] Could not collect
"""


def test_uuids_mig_rows_and_consistent_cudnn_paths() -> None:
    facts = parse_collect_env(MODERN_CUDA)
    assert facts.gpu_models == ["NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"]
    assert facts.cudnn == "8.9.2"  # libcudnn.so.8 agrees with 8.9.2
    assert facts.nccl == "2.20.5"
    assert facts.gcc == "11.4.0"
    assert facts.cmake == "3.29.2"
    assert facts.python == "3.10.12"
    assert facts.missing == ["torch_hip", "clang"]
    assert any("MIG" in note for note in facts.notes)


def test_vllm_aligned_key_format_and_its_sections() -> None:
    text = (
        "==============================\n        System Info\n==============================\n"
        "OS                           : Ubuntu 22.04.5 LTS (x86_64)\n"
        "GCC version                  : (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0\n"
        "==============================\n       PyTorch Info\n==============================\n"
        "PyTorch version              : 2.6.0+cu124\n"
        "Is debug build               : False\n"
        "CUDA used to build PyTorch   : 12.4\n"
        "Is CUDA available            : True\n"
        "CUDA runtime version         : 12.4.131\n"
        "GPU models and configuration : GPU 0: NVIDIA L4\n"
        "Nvidia driver version        : 550.90.07\n"
        "vLLM Version                 : 0.8.5\n"
        "GPU Topology:\n  \tGPU0\tCPU Affinity\nGPU0\t X \t0-23\n"
        "NVIDIA_VISIBLE_DEVICES=all\nLD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/lib\n"
    )
    facts = parse_pr_body(text)
    assert facts is not None
    assert (facts.torch, facts.torch_cuda, facts.cuda_runtime) == ("2.6.0+cu124", "12.4", "12.4.131")
    assert facts.gpu_models == ["NVIDIA L4"]
    assert facts.os == "Ubuntu 22.04.5 LTS (x86_64)"
    assert any("vLLM Version: 0.8.5" in note for note in facts.notes)


def test_xpu_build_notes_and_intel_gpus() -> None:
    text = (
        "PyTorch version: 2.7.0+xpu\nIs debug build: False\nCUDA used to build PyTorch: None\n"
        "ROCM used to build PyTorch: N/A\n\nOS: Ubuntu 24.04.2 LTS (x86_64)\n"
        "Is CUDA available: False\nCUDA runtime version: No CUDA\nGPU models and configuration: No CUDA\n"
        "Nvidia driver version: No CUDA\ncuDNN version: No CUDA\nIs XPU available: True\n"
        "XPU used to build PyTorch: 20250101\nIntel GPU driver version:\n"
        "* intel-opencl-icd:\t25.05.32567.19-1099~24.04\n* libze1:\t1.20.6-1099~24.04\n"
        "Intel GPU models onboard:\n* Intel(R) Arc(TM) B580 Graphics\n"
        "Intel GPU models detected:\n* [0] _XpuDeviceProperties(name='Intel(R) Arc(TM) B580 Graphics')\n"
    )
    facts = parse_collect_env(text)
    assert facts.torch == "2.7.0+xpu"
    assert facts.torch_cuda is None and facts.cuda_available is False
    assert facts.gpu_models == ["Intel(R) Arc(TM) B580 Graphics"]
    assert any(note == "XPU available (XPU build 20250101)" for note in facts.notes)
    assert any("libze1" in note for note in facts.notes)


def test_windows_single_cudnn_dll_and_pip_direct_reference() -> None:
    text = (
        "PyTorch version: 2.1.0+cu118\nCUDA used to build PyTorch: 11.8\nIs CUDA available: True\n"
        "cuDNN version: C:\\Program Files\\NVIDIA\\CUDNN\\v8.9\\bin\\cudnn64_8.dll\n"
        "Versions of relevant libraries:\n[pip3] mylib @ file:///C:/src/mylib\n[pip3] numpy===1.26.0\n"
        "[conda] Could not collect\n"
    )
    facts = parse_collect_env(text)
    assert facts.cudnn == "8"
    assert facts.packages == {"numpy": "1.26.0"}  # a URL is not a version: left out, not invented


def test_ambiguous_nccl_wheels_without_cuda_build_are_not_guessed() -> None:
    text = (
        "PyTorch version: 2.5.0\nIs debug build: False\n"
        "[pip3] nvidia-nccl-cu11==2.21.5\n[pip3] nvidia-nccl-cu12==2.21.5\n[conda] Could not collect\n"
    )
    facts = parse_collect_env(text)
    assert facts.nccl is None
    assert "nccl" in facts.missing
    assert any("which one torch loads is unknown" in note for note in facts.notes)


def _garbage(seed: int, size: int) -> str:
    rng = random.Random(seed)
    alphabet = "abcXYZ019 :.,()`<>/\\|=+-_\t\n\r"
    return "".join(rng.choice(alphabet) for _ in range(size))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "text",
    [
        _garbage(1, 1_000_000),
        "(" * 1_000_000,
        "`" * 1_000_000,
        "<details>" * 120_000,
        "1" * 1_000_000,
        "a:" * 500_000,
    ],
    ids=["random", "parens", "backticks", "tags", "digits", "colons"],
)
def test_a_megabyte_of_garbage_parses_to_nothing(text: str) -> None:
    facts = parse_collect_env(text)
    assert facts.missing == [
        "torch", "torch_cuda", "torch_hip", "cuda_available", "cuda_runtime", "cudnn", "nccl",
        "nvidia_driver", "gpu_models", "python", "os", "libc", "gcc", "clang", "cmake", "platform",
        "packages",
    ]  # fmt: skip
    assert parse_pr_body(text) is None


@pytest.mark.timeout(60)
def test_huge_values_on_real_keys_do_not_hang() -> None:
    text = "PyTorch version: 2.3.0\nIs debug build: False\nGCC version: " + "1" * 1_000_000 + "\n"
    facts = parse_pr_body(text)
    assert facts is not None
    assert facts.torch == "2.3.0"
    assert facts.gcc is None  # a megabyte-long line is not a value


@pytest.mark.timeout(60)
def test_repeated_list_keys_with_long_lines_do_not_hang() -> None:
    text = ("GPU models and configuration:\n" + " " * 3000 + "x\n") * 300
    facts = parse_collect_env(text)
    assert facts.gpu_models == ["x"]  # the first list stands; repeats are not merged into it


# --- CLI ------------------------------------------------------------------------------------------


def test_cli_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert env_parse_main(str(FIXTURES / "body_01.md"), as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["torch"] == "2.12.0a0+rocm7.13.0a20260313"
    assert data["torch_hip"] == "7.2.0"
    assert "nvidia_driver" in data["missing"]


def test_cli_prints_human_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert env_parse_main(str(FIXTURES / "23.txt"), as_json=False) == 0
    out = capsys.readouterr().out
    assert "PyTorch:        1.11.0+cu115" in out
    assert "GPUs:           " + ", ".join(["NVIDIA RTX A5000"] * 8) in out
    assert "Not reported:   torch_hip, nccl" in out


def test_cli_unreadable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert env_parse_main(str(tmp_path / "absent.txt"), as_json=False) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read" in err and "absent.txt" in err
    assert env_parse_main(str(tmp_path), as_json=True) == 2


def test_cli_file_without_a_paste(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "body.md"
    path.write_text("Just a fix, no environment.\n", encoding="utf-8")
    assert env_parse_main(str(path), as_json=False) == 1
    captured = capsys.readouterr()
    assert "no `python -m torch.utils.collect_env` output" in captured.err
    assert captured.out == ""
