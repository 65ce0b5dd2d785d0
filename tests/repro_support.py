"""A run to reproduce: a real git repository whose head breaks a test, and its record in a real
store, as `paritybot repro` finds it on the run page's server (tests and benchmarks/repro_command.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from bot.core.config import Environment, RepoConfig, TestSettings
from bot.core.models import (
    CheckStatus,
    EnvFacts,
    RunReport,
    RunRequest,
    RunState,
    TestCaseResult,
    TestOutcome,
    TestsResult,
)
from bot.service.store.sqlite import SQLiteStore

REPO = "octo/calc"
NODEID = "tests/test_calc.py::test_add"
ERROR = "E       assert 3 == 4"
GOOD_TOKEN = "ghu_viewer"


def git(repo: Path, *args: str) -> str:
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    done = subprocess.run(
        ["git", "-C", str(repo), *identity, *args], check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def make_project(tmp_path: Path) -> dict[str, str]:
    """A repository whose head breaks ``add`` (its test fails) and whose base is fine."""
    repo = tmp_path / "calc"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b + 1\n")
    (repo / "tests" / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 4\n"
    )
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base: add is right")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git(repo, "commit", "-qam", "head: add drops one")
    head = git(repo, "rev-parse", "HEAD")
    return {"path": str(repo), "head": head, "base": base}


def record_job(
    store: SQLiteStore,
    project: dict[str, str],
    image_ref: str,
    *,
    sha: str,
    private: bool,
    probe: EnvFacts | None = None,
) -> str:
    env = Environment(
        name="cpu",
        image="paritybot-test/python:bookworm",
        gpus="none",
        env={"CALC_MODE": "strict"},
        setup=["true"],
    )
    request = RunRequest(
        repo=REPO,
        clone_url=project["path"],
        private=private,
        pr_number=7,
        head_sha=sha,
        head_ref="feature",
        base_ref="main",
        base_sha=project["base"],
        trigger="pull request opened",
        config=RepoConfig(environments=[env], tests=TestSettings(pytest_args=["-p", "no:cacheprovider"])),
    )
    job = store.enqueue(request, "cpu", f"key-{sha}-{private}")
    assert job is not None and store.claim() is not None
    failed = TestCaseResult(nodeid=NODEID, outcome=TestOutcome.FAILED, message=ERROR, traceback=ERROR)
    report = RunReport(
        run_id=job.id,
        repo=REPO,
        pr_number=7,
        head_sha=sha,
        image=env.image,
        image_ref=image_ref,
        image_digest=image_ref,
        runner="docker",
        state=RunState.SUCCEEDED,
        probe=probe or EnvFacts(source="probe", python="3.9.0"),
        tests=TestsResult(status=CheckStatus.FAILED, results=[failed]),
    )
    store.finish(job.id, RunState.SUCCEEDED, report, None)
    return job.id
