"""The environment-parity table: CI reference vs this run vs the contributor's paste."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.collect_env import parse_collect_env
from bot.core.models import AdviceKind, EnvFacts, ParityReport, ParityRow, ParityVerdict
from runner.parity import build_parity, compare_values, cudnn_dotted, reference_from_config, versions_match
from runner.project_stack import ProjectStack, stack_from

FIXTURES = Path(__file__).parent / "fixtures" / "collect_env"
MATCH, DIFFERS, UNKNOWN = ParityVerdict.MATCH, ParityVerdict.DIFFERS, ParityVerdict.UNKNOWN

CI_REFERENCE = {
    "torch": "2.3.0+cu121",
    "torch_cuda": "12.1",
    "cuda_runtime": "12.1",
    "cudnn": "8.9.2",
    "nccl": "2.20.5",
    "nvidia_driver": "535",
    "gpu_models": "NVIDIA A100-SXM4-80GB",
    "python": "3.10",
    "os": "Ubuntu 22.04",
    "libc": "glibc-2.35",
    "gcc": "11.4.0",
    "numpy": "1.26.4",
}


def _probe(**changes: object) -> EnvFacts:
    """What the probe in CI's container reports: the reference, at full precision."""
    facts = EnvFacts(
        source="probe",
        torch="2.3.0+cu121",
        torch_cuda="12.1",
        cuda_available=True,
        cuda_runtime="12.1.105",
        cudnn="8902",  # torch.backends.cudnn.version()
        nccl="2.20.5",
        nvidia_driver="535.161.08",
        gpu_models=["NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"],
        python="3.10.12",
        os="Ubuntu 22.04.4 LTS (x86_64)",
        libc="glibc-2.35",
        gcc="11.4.0",
        packages={"numpy": "1.26.4", "triton": "2.3.0"},
    )
    return facts.model_copy(update=changes)


def _contributor(name: str) -> EnvFacts:
    return parse_collect_env((FIXTURES / name).read_text(encoding="utf-8"))


def _rows(report: ParityReport) -> dict[str, ParityRow]:
    return {row.label: row for row in report.rows}


# --- version comparison ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("12.1", "12.1.105", True),  # match at the precision both give
        ("12.1", "12.4.131", False),
        ("11.8", "12.1", False),
        ("2.3.0+cu121", "2.3.0", True),  # the local tag only counts when both show one
        ("2.3.0+cu121", "2.3.0+cu118", False),
        ("2.3.0+cu121", "2.3.1+cu121", False),
        ("2.5.1", "2.5.1.dev20250308", False),  # a nightly is not the release
        ("2.0.0.dev20230228+cpu-cxx11-abi", "2.0.0.dev20230228+cpu.cxx11.abi", True),  # pip spelling
        ("535", "535.161.08", True),
        ("v3.11", "3.11.9", True),
    ],
)
def test_versions_match(a: str, b: str, same: bool) -> None:
    assert versions_match(a, b) is same
    assert versions_match(b, a) is same


def test_cudnn_integer_form() -> None:
    assert cudnn_dotted("8902") == "8.9.2"
    assert cudnn_dotted("90100") == "9.1.0"
    assert cudnn_dotted("8.9.2") == "8.9.2"
    assert compare_values("cudnn", "8.9.2", "8902") == MATCH
    assert compare_values("cudnn", "9.1.0", "90100") == MATCH
    assert compare_values("cudnn", "8", "8902") == MATCH
    assert compare_values("cudnn", "8.9.7", "8902") == DIFFERS


def test_cudnn_candidate_lists_never_claim_a_match() -> None:
    assert compare_values("cudnn", "one of 7.0.4, 7.0.5", "7.0.5") == UNKNOWN
    assert compare_values("cudnn", "one of 7.0.4, 7.0.5", "8902") == DIFFERS


def test_os_libc_and_gpu_comparisons() -> None:
    assert compare_values("os", "Ubuntu 22.04", "Ubuntu 22.04.4 LTS (x86_64)") == MATCH
    assert compare_values("os", "Ubuntu 22.04.4 LTS (x86_64)", "Ubuntu 20.04.1 LTS (x86_64)") == DIFFERS
    assert compare_values("os", "CentOS Stream 9 (x86_64)", "Ubuntu 22.04.4 LTS (x86_64)") == DIFFERS
    assert compare_values("libc", "glibc-2.35", "glibc-2.34") == DIFFERS
    assert compare_values("gpu_models", ["Tesla T4"], ["NVIDIA Tesla T4", "NVIDIA Tesla T4"]) == MATCH
    assert compare_values("gpu_models", ["NVIDIA H100"], ["NVIDIA A100-SXM4-80GB"]) == DIFFERS
    assert compare_values("python", None, "3.10.12") == UNKNOWN


# --- the table ------------------------------------------------------------------------------------


def test_rows_in_order_with_packages_last() -> None:
    report = build_parity(reference_from_config(CI_REFERENCE), _probe(), None, ["numpy", "triton"])
    assert [row.label for row in report.rows] == [
        "PyTorch",
        "CUDA build",
        "CUDA runtime",
        "cuDNN",
        "NCCL",
        "NVIDIA driver",
        "GPU model",
        "Python",
        "OS",
        "libc",
        "GCC",
        "numpy",
        "triton",
    ]
    rows = _rows(report)
    # every pinned value matches the probe at the precision the pin gives
    assert all(rows[label].verdict == MATCH for label in list(rows)[:-1])
    assert rows["triton"].verdict == UNKNOWN  # not pinned
    assert rows["GPU model"].this_run == "2× NVIDIA A100-SXM4-80GB"
    assert rows["cuDNN"].this_run == "8902"


def test_missing_paste_is_advised_and_contributor_column_is_unknown() -> None:
    report = build_parity(reference_from_config(CI_REFERENCE), _probe(), None, ["numpy"])
    assert report.contributor_pasted is False
    assert all(row.contributor is None and row.contributor_verdict == UNKNOWN for row in report.rows)
    assert [a.kind for a in report.advice] == [AdviceKind.PASTE]
    assert "python -m torch.utils.collect_env" in report.advice[0].text
    assert "PR description" in report.advice[0].text


def test_contributor_on_another_cuda_stack() -> None:
    contributor = _contributor("27.txt")  # cu130 nightly, H100, Python 3.13, CentOS Stream 9
    report = build_parity(reference_from_config(CI_REFERENCE), _probe(), contributor, ["numpy"])
    rows = _rows(report)
    assert report.contributor_pasted is True
    assert rows["CUDA build"].contributor == "13.0"
    assert rows["CUDA build"].contributor_verdict == DIFFERS
    assert rows["cuDNN"].contributor_verdict == UNKNOWN  # the paste says Could not collect
    assert rows["NCCL"].contributor == "2.29.7"
    assert rows["numpy"].contributor_verdict == DIFFERS  # 2.4.4 vs 1.26.4
    texts = [a.text for a in report.advice]
    assert (
        "Your CUDA build 13.0 differs from CI's 12.1: run the repro command in the container above "
        "to test with CI's stack." in texts
    )
    assert texts[0].startswith("Your PyTorch 2.13.0.dev20260518+cu130 differs from CI's 2.3.0+cu121")
    # three decisive lines, then one naming the rest; no drift line (the run matches the pin)
    assert [a.kind for a in report.advice] == [AdviceKind.DIFFERENCE] * 3 + [AdviceKind.OTHER_DIFFERENCES]
    assert texts[-1].startswith("Also different from CI: ")
    assert "numpy" in texts[-1] and "GCC" in texts[-1]


def test_contributor_matching_ci_gets_no_advice() -> None:
    contributor = _probe().model_copy(
        update={"source": "collect_env", "cudnn": "8.9.2", "gpu_models": ["NVIDIA A100-SXM4-80GB"]}
    )
    report = build_parity(reference_from_config(CI_REFERENCE), _probe(), contributor, ["numpy"])
    assert all(row.contributor_verdict == MATCH for row in report.rows)
    assert report.advice == []


def test_contributor_compared_with_reference_when_this_run_lacks_a_value() -> None:
    run = _probe(nccl=None, nvidia_driver=None)
    contributor = _probe(nccl="2.18.1", nvidia_driver="535.54.03")
    rows = _rows(build_parity(reference_from_config(CI_REFERENCE), run, contributor, []))
    assert rows["NCCL"].verdict == UNKNOWN  # reference vs a run that does not know
    assert rows["NCCL"].contributor_verdict == DIFFERS  # 2.18.1 vs the pinned 2.20.5
    assert rows["NVIDIA driver"].contributor_verdict == MATCH  # 535.54.03 vs the pinned 535


def test_no_reference_and_no_run_leave_everything_unknown() -> None:
    report = build_parity(None, None, _contributor("23.txt"), ["numpy"])
    assert all(row.verdict == UNKNOWN and row.contributor_verdict == UNKNOWN for row in report.rows)
    assert _rows(report)["GPU model"].contributor == "8× NVIDIA RTX A5000"
    assert report.advice == []


def test_cpu_only_contributor_is_told_gpu_paths_were_not_run() -> None:
    report = build_parity(None, _probe(), _contributor("20.txt"), [])  # 1.7.0 nightly +cpu
    assert report.advice[0].kind == AdviceKind.BACKEND
    assert report.advice[0].text.startswith(
        "Your PyTorch has no CUDA support and CI runs CUDA 12.1 on 2× NVIDIA A100"
    )


def test_mac_contributor_counts_as_no_cuda() -> None:
    report = build_parity(None, _probe(), _contributor("14.txt"), [])
    assert "no CUDA support" in report.advice[0].text


def test_rocm_contributor_against_cuda_ci() -> None:
    report = build_parity(None, _probe(), _contributor("11.txt"), [])
    rows = _rows(report)
    assert rows["ROCm build"].contributor == "6.1.40093-bd86f1708"
    assert rows["ROCm build"].this_run is None
    assert report.advice[0].text.startswith(
        "You ran a ROCm build (HIP 6.1.40093-bd86f1708) and CI runs CUDA 12.1"
    )


def test_cuda_build_without_a_visible_gpu() -> None:
    report = build_parity(None, _probe(), _contributor("26.txt"), [])
    assert "built with CUDA 13.0 but saw no GPU" in report.advice[0].text


def test_rocm_ci_and_cuda_contributor() -> None:
    rocm_ci = EnvFacts(source="probe", torch="2.3.0+rocm6.0", torch_hip="6.0.32830", python="3.10.12")
    report = build_parity(None, rocm_ci, _contributor("23.txt"), [])
    assert report.advice[0].text.startswith("CI runs a ROCm build (HIP 6.0.32830) and you ran a CUDA one")


def test_optional_compiler_rows_only_when_reported() -> None:
    without = build_parity(None, _probe(), _contributor("27.txt"), [])  # no clang, no cmake anywhere
    assert "Clang" not in _rows(without) and "CMake" not in _rows(without)
    with_clang = build_parity(None, _probe(), _contributor("23.txt"), [])
    assert _rows(with_clang)["Clang"].contributor == "6.0.0"
    assert _rows(with_clang)["Clang"].contributor_verdict == UNKNOWN


def test_image_drift_from_the_pinned_reference_is_advised() -> None:
    run = _probe(cuda_runtime="12.4.131", torch="2.4.0+cu124", torch_cuda="12.4")
    report = build_parity(reference_from_config(CI_REFERENCE), run, None, [])
    rows = _rows(report)
    assert rows["CUDA runtime"].verdict == DIFFERS
    assert report.advice[-1].kind == AdviceKind.DRIFT
    drift = report.advice[-1].text
    assert drift.startswith(
        "This run differs from the pinned CI reference: PyTorch 2.4.0+cu124 (pinned 2.3.0+cu121)"
    )
    assert "CUDA runtime 12.4.131 (pinned 12.1)" in drift


def test_package_rows_use_normalised_names_and_torch_falls_back() -> None:
    contributor = _contributor("27.txt")
    report = build_parity(None, _probe(), contributor, ["mypy_extensions", "torch", "Mypy-Extensions"])
    rows = _rows(report)
    assert [row.label for row in report.rows][-2:] == ["mypy_extensions", "torch"]  # duplicates dropped
    assert rows["mypy_extensions"].contributor == "1.1.0"
    assert rows["torch"].contributor == "2.13.0.dev20260517+cu130"  # what pip has installed
    assert rows["torch"].this_run == "2.3.0+cu121"  # the probe lists no packages["torch"]


# --- the pinned reference -------------------------------------------------------------------------


def test_reference_from_config_maps_fields_and_packages() -> None:
    facts = reference_from_config(
        {
            **CI_REFERENCE,
            "gpu_models": "NVIDIA H100 80GB HBM3, NVIDIA L4",
            "pkg:torch_geometric": "2.5.3",
            "cuda_available": "true",
        }
    )
    assert facts.source == "config"
    assert facts.torch == "2.3.0+cu121"
    assert facts.gpu_models == ["NVIDIA H100 80GB HBM3", "NVIDIA L4"]
    assert facts.cuda_available is True
    assert facts.packages == {"numpy": "1.26.4", "torch-geometric": "2.5.3"}


@pytest.mark.parametrize(
    ("mapping", "named"),
    [
        ({"cuda_runtim": "12.1"}, "'cuda_runtim'"),  # a misspelt field is not silently a package
        ({"CUDA version": "12.1"}, "'CUDA version'"),
        ({"source": "probe"}, "'source'"),
        ({"missing": "cudnn"}, "'missing'"),
        ({"pkg:": "1.0"}, "'pkg:'"),
        ({"torch": "  "}, "parity.reference.torch"),
        ({"gpu_models": " , "}, "parity.reference.gpu_models"),
        ({"cuda_available": "maybe"}, "parity.reference.cuda_available"),
    ],
)
def test_reference_from_config_rejects_bad_keys(mapping: dict[str, str], named: str) -> None:
    with pytest.raises(ValueError, match=r"parity\.reference") as info:
        reference_from_config(mapping)
    assert named in str(info.value)


def test_a_report_stored_before_advice_had_kinds_still_reads() -> None:
    stored = (
        '{"rows": [], "advice": ["Your Python 3.12 differs from CI\'s 3.10."], "contributor_pasted": true}'
    )
    report = ParityReport.model_validate_json(stored)
    assert [(a.kind, a.text) for a in report.advice] == [
        (AdviceKind.NOTE, "Your Python 3.12 differs from CI's 3.10.")
    ]


# --- only what the project uses ------------------------------------------------------------------


def test_what_a_project_uses_is_read_from_its_dependencies_and_imports() -> None:
    assert stack_from(['[project]\ndependencies = ["numpy>=1.24", "scipy"]\n'], ["import numpy as np\n"]) == (
        ProjectStack(torch=False, gpu=False)
    )
    assert stack_from(["torch>=2.1\n"], []).torch
    assert stack_from([], ["from torch import nn\n"]).torch
    assert stack_from(["dependencies:\n  - pytorch\n"], []).torch  # conda's name
    cupy = stack_from([], ["import cupy\n"])
    assert cupy.gpu and not cupy.torch
    # A name that only contains it is not it.
    assert stack_from(["torchvision-like-name\n", "torch_geometric_extras\n"], ["import torchmetrics\n"]) == (
        ProjectStack(torch=False, gpu=False)
    )


def test_a_project_without_torch_gets_no_torch_or_cuda_rows_and_no_paste_request() -> None:
    probe = _probe()
    plain = build_parity(None, probe, None, ["numpy"], ProjectStack(torch=False, gpu=False))

    fields = [r.field for r in plain.rows]
    assert not {"torch", "torch_cuda", "cudnn", "nccl", "cuda_runtime", "nvidia_driver", "gpu_models"} & set(
        fields
    )
    assert fields[:2] == ["python", "os"] and "pkg:numpy" in fields
    assert not plain.uses_torch
    assert [a.kind for a in plain.advice] == [AdviceKind.SCOPE]
    assert "the project neither depends on nor imports PyTorch or a GPU library" in plain.advice[0].text

    # GPU code without PyTorch keeps the GPU's rows; a pinned reference keeps what it pins.
    gpu = build_parity(None, probe, None, [], ProjectStack(torch=False, gpu=True))
    assert {"cuda_runtime", "nvidia_driver", "gpu_models"} <= {r.field for r in gpu.rows}
    pinned = build_parity(
        reference_from_config({"torch": "2.3.0"}), probe, None, [], ProjectStack(False, False)
    )
    assert "torch" in {r.field for r in pinned.rows}
    # Unknown (None): every row, as before.
    assert {"torch", "cudnn"} <= {r.field for r in build_parity(None, probe, None, []).rows}
