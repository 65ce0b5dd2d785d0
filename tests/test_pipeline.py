"""The pipeline's own decisions: which coverage map a PR's selection uses, when a run stops."""

from __future__ import annotations

from pathlib import Path

from gitrepo import GitRepo

from bot.core.config import Environment, RepoConfig
from bot.core.models import CollectionError, CoverageMapHealth, RunRequest
from runner.backends.base import RunnerRequest
from runner.backends.host import HostRunner
from runner.pipeline import Pipeline, PipelineDeps
from runner.selection.coverage_map import CoverageMap, CoverageMapStore
from runner.selection.pr import nearest_map


def pipeline(tmp_path: Path) -> Pipeline:
    async def host(request: RunnerRequest) -> HostRunner:
        return HostRunner()

    deps = PipelineDeps(runner_factory=host, workspace_root=tmp_path / "ws", cache_root=tmp_path / "cache")
    request = RunRequest(repo="octo/calc", clone_url="unused", head_sha="0" * 40)
    return Pipeline(request, RepoConfig(), Environment(name="default"), "run-1", deps)


def test_the_nearest_ancestor_with_a_usable_map_is_used(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    mapped = repo.commit({"a.py": "x = 1\n"})
    between = repo.commit({"a.py": "x = 2\n"})
    base = repo.commit({"a.py": "x = 3\n"})
    p = pipeline(tmp_path)
    store = CoverageMapStore(p._coverage_dir())
    store.save(
        mapped, CoverageMap(commit=mapped, tests=["tests/test_a.py::test_x"], files={"a.py": {1: [0]}})
    )

    found, notes = nearest_map(repo.path, base, store)
    assert found is not None and found.commit == mapped and notes == []

    empty = CoverageMapHealth(
        tests_collected=1, collection_errors=[CollectionError(path="tests/test_a.py", message="ImportError")]
    )
    store.save(between, CoverageMap(commit=between, health=empty))
    found, notes = nearest_map(repo.path, base, store)
    assert found is not None and found.commit == mapped
    assert notes == [
        f"The coverage map of {between[:12]} is not used: 0 of 1 collected tests ran; "
        "1 module did not collect: tests/test_a.py (ImportError)."
    ]


def test_no_map_in_the_history_means_none(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit({"a.py": "x = 1\n"})
    assert nearest_map(repo.path, base, CoverageMapStore(tmp_path / "maps")) == (None, [])


async def test_a_run_past_its_time_limit_is_stopped_and_says_so(tmp_path: Path) -> None:
    from bot.cli.demo import make_demo_repo
    from bot.core.models import RunState

    demo = make_demo_repo(tmp_path)
    slow_setup = Environment(name="default", timeout_minutes=0.02, setup=["sleep 30"])  # 1.2 s

    async def host(request: RunnerRequest) -> HostRunner:
        return HostRunner()

    deps = PipelineDeps(runner_factory=host, workspace_root=tmp_path / "ws", cache_root=tmp_path / "cache")
    request = RunRequest(
        repo="octo/calc", clone_url=str(demo.path), head_sha=demo.head_sha, base_sha=demo.base_sha
    )
    report = await Pipeline(request, RepoConfig(), slow_setup, "run-2", deps).execute()
    assert report.state == RunState.FAILED
    assert report.error is not None and "timeout_minutes" in report.error
    assert report.probe is not None  # what finished before the limit is kept
    assert report.finished_at is not None and report.started_at is not None
    assert (report.finished_at - report.started_at).total_seconds() < 20
