"""Realistic RunReports for tests: what the pipeline produces for the runs people actually see.

Each builder returns a fresh report, so a test may change it freely. The values follow what real
tools print: pytest's tracebacks and node ids, pre-commit's hook names and diffs, ruff's
``path:line:col:`` lines, ``torch.utils.collect_env`` fields.
"""

from __future__ import annotations

from datetime import UTC, datetime

from bot.core.models import (
    CheckStatus,
    DocstringResult,
    EnvFacts,
    Finding,
    HookResult,
    HookStatus,
    Level,
    ParityReport,
    ParityRow,
    ParityVerdict,
    PrecommitResult,
    RfcItem,
    RfcReport,
    RunReport,
    RunState,
    SelectedTest,
    Selection,
    TestCaseResult,
    TestOutcome,
    TestsResult,
)

REPO = "acme/fastconv"
PR = 482
HEAD_SHA = "3f9c2e1d8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e"
BASE_SHA = "a0b1c2d3e4f5061728394a5b6c7d8e9f00112233"
DIGEST = "sha256:9a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9"
IMAGE = "ghcr.io/acme/fastconv-ci:cuda12.1-py3.11"
IMAGE_REF = f"ghcr.io/acme/fastconv-ci@{DIGEST}"
STARTED = datetime(2024, 6, 3, 14, 2, 11, tzinfo=UTC)
FINISHED = datetime(2024, 6, 3, 14, 16, 48, tzinfo=UTC)
SUITE_SIZE = 1284


def repro(nodeid: str, image_ref: str | None = IMAGE_REF, sha: str = HEAD_SHA) -> list[str]:
    """The commands the runner prints to rerun one test where it failed."""
    checkout = f"git fetch origin pull/{PR}/head && git checkout {sha[:12]}"
    pytest = f"python -m pytest -p no:cacheprovider -x '{nodeid}'"
    if image_ref is None:
        return [checkout, pytest]
    return [
        checkout,
        f'docker run --rm --gpus all --shm-size 8g -e PYTHONHASHSEED=0 -v "$PWD":/workspace '
        f"-w /workspace {image_ref} {pytest}",
    ]


# --- Pieces -----------------------------------------------------------------------------------------


def probe_facts() -> EnvFacts:
    return EnvFacts(
        source="probe",
        torch="2.3.1+cu121",
        torch_cuda="12.1",
        cuda_available=True,
        cuda_runtime="12.1.105",
        cudnn="8.9.2",
        nccl="2.20.5",
        nvidia_driver="535.161.08",
        gpu_models=["NVIDIA A100-SXM4-80GB"],
        python="3.11.9",
        os="Ubuntu 22.04.4 LTS (x86_64)",
        libc="glibc-2.35",
        gcc="11.4.0",
        cmake="3.29.3",
        platform="Linux-5.15.0-105-generic-x86_64-with-glibc2.35",
        packages={"numpy": "2.0.0", "triton": "2.3.1", "torch": "2.3.1+cu121", "pytest": "8.2.1"},
    )


def _row(
    field: str,
    label: str,
    reference: str | None,
    this_run: str | None,
    contributor: str | None,
    verdict: ParityVerdict,
    contributor_verdict: ParityVerdict = ParityVerdict.UNKNOWN,
) -> ParityRow:
    return ParityRow(
        field=field,
        label=label,
        reference=reference,
        this_run=this_run,
        contributor=contributor,
        verdict=verdict,
        contributor_verdict=contributor_verdict,
    )


M, D, U = ParityVerdict.MATCH, ParityVerdict.DIFFERS, ParityVerdict.UNKNOWN


def parity_with_differences() -> ParityReport:
    """The CI image drifted on numpy; the contributor runs a newer CUDA on a consumer GPU."""
    return ParityReport(
        rows=[
            _row("image", "Image", DIGEST[:19], DIGEST[:19], None, M),
            _row("torch", "PyTorch", "2.3.1+cu121", "2.3.1+cu121", "2.3.1+cu121", M, M),
            _row("torch_cuda", "PyTorch built with CUDA", "12.1", "12.1", "12.4", M, D),
            _row("cuda_runtime", "CUDA runtime", "12.1.105", "12.1.105", "12.4.131", M, D),
            _row("cudnn", "cuDNN", "8.9.2", "8.9.2", "8.9.7", M, D),
            _row("nvidia_driver", "NVIDIA driver", None, "535.161.08", "550.54.14", U, U),
            _row(
                "gpu_models",
                "GPU",
                "NVIDIA A100-SXM4-80GB",
                "NVIDIA A100-SXM4-80GB",
                "NVIDIA GeForce RTX 4090",
                M,
                D,
            ),
            _row("python", "Python", "3.11.9", "3.11.9", "3.11.9", M, M),
            _row("package:numpy", "numpy", "1.26.4", "2.0.0", "1.26.4", D, M),
        ],
        advice=[
            "numpy in this run (2.0.0) is not the CI reference (1.26.4): the image was rebuilt "
            "since the reference was pinned; update `parity.reference` or pin numpy in the image.",
            "Your CUDA runtime (12.4) and cuDNN (8.9.7) are newer than CI's: a numerical difference "
            "may come from cuDNN's kernel choice; the repro commands run a test in CI's image.",
        ],
        contributor_pasted=True,
    )


def parity_matching(pasted: bool = False) -> ParityReport:
    yours = "2.3.1+cu121" if pasted else None
    return ParityReport(
        rows=[
            _row("torch", "PyTorch", "2.3.1+cu121", "2.3.1+cu121", yours, M, M if pasted else U),
            _row("cuda_runtime", "CUDA runtime", "12.1.105", "12.1.105", None, M),
            _row("cudnn", "cuDNN", "8.9.2", "8.9.2", None, M),
            _row("gpu_models", "GPU", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", None, M),
            _row("python", "Python", "3.11.9", "3.11.9", None, M),
            _row("package:numpy", "numpy", "1.26.4", "1.26.4", None, M),
        ],
        contributor_pasted=pasted,
    )


def precommit_passed() -> PrecommitResult:
    return PrecommitResult(
        status=CheckStatus.PASSED,
        hooks=[
            HookResult(id="trailing-whitespace", name="trim trailing whitespace", status=HookStatus.PASSED),
            HookResult(id="end-of-file-fixer", name="fix end of files", status=HookStatus.PASSED),
            HookResult(id="ruff", name="ruff", status=HookStatus.PASSED),
            HookResult(id="ruff-format", name="ruff-format", status=HookStatus.PASSED),
            HookResult(id="mypy", name="mypy", status=HookStatus.SKIPPED),
        ],
    )


PRECOMMIT_DIFF = """\
diff --git a/fastconv/ops.py b/fastconv/ops.py
index 3c1d2e4..8f7a6b5 100644
--- a/fastconv/ops.py
+++ b/fastconv/ops.py
@@ -84,9 +84,9 @@ def fused_conv_bias_relu(x, weight, bias, stride=1, padding=0):
     if x.dtype not in _SUPPORTED:
-        raise TypeError(f"unsupported dtype {x.dtype}" )
+        raise TypeError(f"unsupported dtype {x.dtype}")
-    out = _C.fused_conv(x,weight,bias,stride,padding)
-    return  torch.relu_(out)
+    out = _C.fused_conv(x, weight, bias, stride, padding)
+    return torch.relu_(out)
diff --git a/fastconv/_cuda/__init__.py b/fastconv/_cuda/__init__.py
index 1a2b3c4..5d6e7f8 100644
--- a/fastconv/_cuda/__init__.py
+++ b/fastconv/_cuda/__init__.py
@@ -12,3 +12,4 @@ from fastconv._cuda.kernels import load_kernels
 __all__ = ["load_kernels"]
-# end
\\ No newline at end of file
+# end
"""


def precommit_failed() -> PrecommitResult:
    return PrecommitResult(
        status=CheckStatus.FAILED,
        hooks=[
            HookResult(id="trailing-whitespace", name="trim trailing whitespace", status=HookStatus.PASSED),
            HookResult(
                id="end-of-file-fixer",
                name="fix end of files",
                status=HookStatus.FAILED,
                files_modified=True,
                output="Fixing fastconv/_cuda/__init__.py\n",
            ),
            HookResult(
                id="ruff",
                name="ruff",
                status=HookStatus.FAILED,
                output=(
                    "fastconv/ops.py:91:5: F841 Local variable `scale` is assigned to but never used\n"
                    "fastconv/ops.py:7:1: I001 [*] Import block is un-sorted or un-formatted\n"
                    "Found 2 errors.\n"
                    "[*] 1 fixable with the `--fix` option.\n"
                ),
            ),
            HookResult(
                id="ruff-format",
                name="ruff-format",
                status=HookStatus.FAILED,
                files_modified=True,
                output="1 file reformatted, 11 files left unchanged\n",
            ),
            HookResult(id="mypy", name="mypy", status=HookStatus.SKIPPED),
        ],
        fix_command="pre-commit run --files fastconv/ops.py fastconv/_cuda/__init__.py",
        diff=PRECOMMIT_DIFF,
    )


def docstrings_with_findings() -> DocstringResult:
    return DocstringResult(
        status=CheckStatus.FAILED,
        style="google",
        checked=7,
        findings=[
            Finding(
                path="fastconv/ops.py",
                line=84,
                title="missing Returns",
                message="`fused_conv_bias_relu` returns a value but its docstring has no Returns section",
            ),
            Finding(
                path="fastconv/ops.py",
                line=84,
                end_line=86,
                title="undocumented argument",
                message="argument `padding` of `fused_conv_bias_relu` is not in the Args section",
            ),
            Finding(
                path="fastconv/_cuda/kernels.py",
                line=22,
                title="missing docstring",
                message="public function `load_kernels` has no docstring",
            ),
        ],
    )


def selection_targeted() -> Selection:
    return Selection(
        tests=[
            SelectedTest(
                nodeid="tests/test_conv.py::test_conv2d_matches_reference[float16-3x3]",
                reasons=["edited by this PR"],
            ),
            SelectedTest(
                nodeid="tests/test_conv.py::test_conv2d_matches_reference[float32-3x3]",
                reasons=["edited by this PR"],
            ),
            SelectedTest(
                nodeid="tests/test_ops.py::TestFused::test_backward[float16]",
                reasons=["imports fastconv/ops.py"],
            ),
            SelectedTest(
                nodeid="tests/test_ops.py::TestFused::test_forward[float16]",
                reasons=["imports fastconv/ops.py"],
            ),
            SelectedTest(
                nodeid="tests/test_ops.py::TestFused::test_forward[bfloat16]",
                reasons=["imports fastconv/ops.py"],
            ),
            SelectedTest(
                nodeid="tests/test_dist.py::test_allreduce_two_gpus",
                reasons=["covered fastconv/_cuda/kernels.py in the coverage map"],
            ),
            SelectedTest(nodeid="tests/test_smoke.py::test_import", reasons=["always_run"]),
        ],
        total_tests=SUITE_SIZE,
    )


CONV_FAILURE = """\
    @pytest.mark.parametrize("dtype,kernel", [(torch.float16, 3), (torch.float32, 3)])
    def test_conv2d_matches_reference(dtype, kernel):
        x = torch.randn(8, 64, 56, 56, device="cuda", dtype=dtype)
        w = torch.randn(128, 64, kernel, kernel, device="cuda", dtype=dtype)
>       torch.testing.assert_close(fastconv.conv2d(x, w), F.conv2d(x, w), rtol=1e-3, atol=1e-3)
E       AssertionError: Tensor-likes are not close!
E
E       Mismatched elements: 1843 / 3211264 (0.1%)
E       Greatest absolute difference: 0.0078125 at index (3, 17, 40, 2) (up to 0.001 allowed)
E       Greatest relative difference: 0.0213623046875 at index (5, 101, 0, 55) (up to 0.001 allowed)

tests/test_conv.py:57: AssertionError"""

BACKWARD_FAILURE = """\
self = <tests.test_ops.TestFused object at 0x7f3a2c1d5e10>, dtype = torch.float16

    def test_backward(self, dtype):
        x = torch.randn(4, 32, 28, 28, device="cuda", dtype=dtype, requires_grad=True)
>       out = fastconv.fused_conv_bias_relu(x, self.weight(dtype), self.bias(dtype))

tests/test_ops.py:118:
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _
/workspace/fastconv/ops.py:90: in fused_conv_bias_relu
    out = _C.fused_conv(x, weight, bias, stride, padding)
E   RuntimeError: CUDA error: an illegal memory access was encountered
E   CUDA kernel errors might be asynchronously reported at some other API call, so the \
stacktrace below might be incorrect.
E   For debugging consider passing CUDA_LAUNCH_BLOCKING=1.
E   Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."""

FLAKY_FAILURE = """\
tests/test_dist.py:41: in test_allreduce_two_gpus
    dist.init_process_group("nccl", rank=rank, world_size=2, timeout=timedelta(seconds=30))
E   torch.distributed.DistNetworkError: The server socket has failed to listen on any local \
network address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use"""


def _passed(nodeid: str, seconds: float) -> TestCaseResult:
    return TestCaseResult(nodeid=nodeid, outcome=TestOutcome.PASSED, duration_s=seconds)


def tests_failed() -> TestsResult:
    conv = "tests/test_conv.py::test_conv2d_matches_reference[float16-3x3]"
    backward = "tests/test_ops.py::TestFused::test_backward[float16]"
    dist = "tests/test_dist.py::test_allreduce_two_gpus"
    return TestsResult(
        status=CheckStatus.FAILED,
        selection=selection_targeted(),
        results=[
            # Out of name order on purpose: pytest-xdist reports in completion order.
            TestCaseResult(
                nodeid=backward,
                outcome=TestOutcome.FAILED,
                duration_s=2.41,
                message=BACKWARD_FAILURE,
                attempts=3,
                repro=repro(backward),
            ),
            TestCaseResult(
                nodeid=conv,
                outcome=TestOutcome.FAILED,
                duration_s=0.87,
                message=CONV_FAILURE,
                attempts=3,
                repro=repro(conv),
            ),
            TestCaseResult(
                nodeid=dist,
                outcome=TestOutcome.FLAKY,
                duration_s=31.2,
                message=FLAKY_FAILURE,
                attempts=2,
                repro=repro(dist),
            ),
            _passed("tests/test_conv.py::test_conv2d_matches_reference[float32-3x3]", 0.91),
            _passed("tests/test_ops.py::TestFused::test_forward[float16]", 0.33),
            _passed("tests/test_ops.py::TestFused::test_forward[bfloat16]", 0.35),
            _passed("tests/test_smoke.py::test_import", 0.02),
        ],
        selected=7,
        deselected=SUITE_SIZE - 7,
    )


def tests_passed(image_ref: str | None = IMAGE_REF) -> TestsResult:
    selection = selection_targeted()
    return TestsResult(
        status=CheckStatus.PASSED,
        selection=selection,
        results=[_passed(t.nodeid, 0.5) for t in selection.tests],
        selected=len(selection.tests),
        deselected=SUITE_SIZE - len(selection.tests),
    )


def rfc_triggered() -> RfcReport:
    return RfcReport(
        triggered=True,
        reasons=[
            "changes files under `fastconv/_cuda/` (rfc.paths: `fastconv/_cuda/**`)",
            "adds a dependency: triton",
        ],
        items=[
            RfcItem(text="Motivation: why this change is needed", done=True),
            RfcItem(text="Alternatives considered", done=True),
            RfcItem(text="Backward compatibility and migration path"),
            RfcItem(text="Impact on downstream projects"),
            RfcItem(text="Link to the RFC"),
        ],
    )


def _base(**changes: object) -> RunReport:
    report = RunReport(
        run_id="run-20240603-140211-7c2e",
        repo=REPO,
        pr_number=PR,
        head_sha=HEAD_SHA,
        base_sha=BASE_SHA,
        environment="cuda12",
        image=IMAGE,
        image_digest=DIGEST,
        image_ref=IMAGE_REF,
        runner="docker",
        runner_reason="environment cuda12 names an image",
        state=RunState.SUCCEEDED,
        probe=probe_facts(),
        started_at=STARTED,
        finished_at=FINISHED,
    )
    return report.model_copy(update=changes)


# --- Whole reports ----------------------------------------------------------------------------------


def all_green() -> RunReport:
    """Everything passed in CI's image; the contributor pasted no environment."""
    return _base(
        precommit=precommit_passed(),
        docstrings=DocstringResult(status=CheckStatus.PASSED, style="google", checked=4),
        tests=tests_passed(),
        parity=parity_matching(pasted=False),
        rfc=RfcReport(triggered=False),
    )


def failing_run() -> RunReport:
    """2 failed + 1 flaky, pre-commit failed, 3 docstring findings, parity differences, RFC due."""
    return _base(
        state=RunState.FAILED,
        precommit=precommit_failed(),
        docstrings=docstrings_with_findings(),
        tests=tests_failed(),
        parity=parity_with_differences(),
        rfc=rfc_triggered(),
    )


def host_run() -> RunReport:
    """The operator runs trusted authors' code on the host; pre-commit not configured."""
    selection = Selection(
        tests=[
            SelectedTest(nodeid=f"tests/test_conv.py::test_shapes[{n}]", reasons=["edited by this PR"])
            for n in (1, 2, 3)
        ],
        whole_suite=False,
        total_tests=SUITE_SIZE,
    )
    return _base(
        environment="host",
        image=None,
        image_digest=None,
        image_ref=None,
        runner="host",
        runner_reason="`PARITYBOT_RUNNER=host`, and the code's author is trusted",
        precommit=PrecommitResult(
            status=CheckStatus.NOT_CONFIGURED, message="no .pre-commit-config.yaml in the repository"
        ),
        docstrings=DocstringResult(status=CheckStatus.DISABLED),
        tests=TestsResult(
            status=CheckStatus.PASSED,
            selection=selection,
            results=[_passed(t.nodeid, 0.2) for t in selection.tests]
            + [TestCaseResult(nodeid="tests/test_conv.py::test_shapes[4]", outcome=TestOutcome.SKIPPED)],
            selected=4,
            deselected=SUITE_SIZE - 4,
        ),
        parity=ParityReport(
            rows=[
                _row("torch", "PyTorch", None, "2.3.1+cu121", None, U),
                _row("cuda_runtime", "CUDA runtime", None, "12.1.105", None, U),
                _row("gpu_models", "GPU", None, "NVIDIA L4", None, U),
            ],
            advice=["No CI reference is pinned: set `parity.reference` in .github/paritybot.yml."],
        ),
    )


def run_error() -> RunReport:
    """The image could not be pulled: nothing ran."""
    return _base(
        state=RunState.FAILED,
        probe=None,
        error=(
            f"could not pull {IMAGE}: Error response from daemon: Head "
            '"https://ghcr.io/v2/acme/fastconv-ci/manifests/cuda12.1-py3.11": denied: denied'
        ),
        finished_at=datetime(2024, 6, 3, 14, 2, 40, tzinfo=UTC),
    )


def refused_run() -> RunReport:
    """The repository names no image and the service has no default one: nothing ran anywhere."""
    return _base(
        state=RunState.FAILED,
        environment="default",
        image=None,
        image_digest=None,
        image_ref=None,
        runner="",
        runner_reason="",
        probe=None,
        refused=True,
        error=(
            "no environment image configured: environment default names no image (set `image:` for "
            "it in .github/paritybot.yml on the default branch, or PARITYBOT_DEFAULT_IMAGE in the "
            "service's settings); nothing was run on the host instead"
        ),
        finished_at=datetime(2024, 6, 3, 14, 2, 12, tzinfo=UTC),
    )


def whole_suite_timeout() -> RunReport:
    """conftest.py changed, so the whole suite ran, and the tests step hit its time limit."""
    selection = Selection(
        whole_suite=True,
        whole_suite_reasons=["`tests/conftest.py` changed (tests.whole_suite_globs: `**/conftest.py`)"],
        total_tests=SUITE_SIZE,
    )
    return _base(
        state=RunState.FAILED,
        precommit=precommit_passed(),
        docstrings=DocstringResult(status=CheckStatus.PASSED, checked=0),
        tests=TestsResult(
            status=CheckStatus.ERROR,
            selection=selection,
            message="tests: timed out after 1800 s and was killed",
            output="tests/test_dist.py::test_allreduce_two_gpus PASSED\ntests/test_dist.py::test_broadcast ",
            results=[_passed("tests/test_conv.py::test_shapes[1]", 0.2)],
            selected=SUITE_SIZE,
            deselected=0,
        ),
        parity=parity_matching(pasted=True),
        finished_at=datetime(2024, 6, 3, 14, 35, 30, tzinfo=UTC),
    )


def cancelled_run() -> RunReport:
    """Superseded by a push while the tests ran: pre-commit had passed."""
    return _base(
        state=RunState.CANCELLED,
        precommit=precommit_passed(),
        docstrings=DocstringResult(status=CheckStatus.PASSED, checked=3),
        parity=parity_matching(pasted=False),
        finished_at=datetime(2024, 6, 3, 14, 5, 2, tzinfo=UTC),
    )


def running_run() -> RunReport:
    """Half-way: pre-commit and docstrings done, tests still running."""
    return _base(
        state=RunState.RUNNING,
        precommit=precommit_passed(),
        docstrings=docstrings_with_findings(),
        parity=parity_matching(pasted=False),
        finished_at=None,
    )


CONFIG_PROBLEMS = [
    "`tests.reruns` = 20: Input should be less than or equal to 10",
    "`environments.0.gpu`: unknown key",
]


def many_failures(count: int = 500, message_chars: int = 20_000, diff_chars: int = 1_000_000) -> RunReport:
    """A PR that breaks everything: ``count`` failing tests with huge errors, and a huge diff."""
    results = []
    for i in range(count):
        nodeid = f"tests/test_ops_{i % 40:02d}.py::TestOp::test_case[{i:04d}-float16-" + "x" * 40 + "]"
        body = "".join(f"E   frame {j}: value mismatch at index {j}\n" for j in range(message_chars // 40))
        message = body + f"tests/test_ops_{i % 40:02d}.py:{10 + i}: AssertionError"
        results.append(
            TestCaseResult(
                nodeid=nodeid,
                outcome=TestOutcome.FAILED if i % 7 else TestOutcome.ERROR,
                message=message,
                attempts=3,
                repro=repro(nodeid),
            )
        )
    results.append(
        TestCaseResult(
            nodeid="unittest_legacy.TestOld.test_thing", outcome=TestOutcome.FAILED, message="boom"
        )
    )
    findings = [
        Finding(
            path=f"fastconv/mod_{i}.py",
            line=i + 1,
            level=Level.WARNING,
            message="x" * 500,
            title="missing docstring",
        )
        for i in range(300)
    ]
    diff_line = "+    out = _C.fused_conv(x, weight, bias, stride, padding)  # reformatted\n"
    report = failing_run()
    report.tests = TestsResult(
        status=CheckStatus.FAILED,
        selection=Selection(
            whole_suite=True, whole_suite_reasons=["`pyproject.toml` changed"], total_tests=SUITE_SIZE
        ),
        results=results,
        selected=len(results),
        deselected=0,
    )
    assert report.precommit is not None and report.docstrings is not None
    report.precommit.diff = PRECOMMIT_DIFF + diff_line * (diff_chars // len(diff_line))
    report.docstrings.findings = findings
    return report
