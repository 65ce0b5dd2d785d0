"""`paritybot check`: the PR pipeline on a local git checkout, no GitHub needed.

It runs exactly what the App runs for a PR — the same workspace preparation from a clean clone
of the commit, the config of the PR's base, the same checks — and prints the markdown the PR
comment would carry. Uncommitted changes are not part of a commit, so they are not checked (we say
so). Unlike `serve`, it may run the code on this machine's host (it is the user's own checkout),
and says so before anything runs.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

from pydantic import ValidationError

from bot.cli.checkout import UsageError, cache_dir, cache_root, commit_of, coverage_dir, open_checkout
from bot.core.config import (
    CONFIG_PATH,
    ConfigError,
    Environment,
    RepoConfig,
    format_config_errors,
    parse_repo_config,
)
from bot.core.kinds import Stage
from bot.core.models import RunKind, RunReport, RunRequest
from bot.core.verdict import Verdict, pre_existing_failures, verdict
from bot.render.comment import render_comment
from runner import gitdiff
from runner.backends.base import Runner, RunnerError, RunnerFactory, RunnerRequest
from runner.backends.choice import CHECK_ENGINE_HINT, CHECK_IMAGE_HINT, RunnerMode, RunnerPolicy
from runner.backends.host import HostRunner
from runner.backends.localenv import BaseInterpreter, RunEnvRunner, with_configured
from runner.git import GitError, git
from runner.pipeline import Pipeline, PipelineDeps


def default_base(repo: Path) -> str:
    """The branch a PR from here would target: origin's HEAD, else main or master, else HEAD~1."""
    for candidate in ("refs/remotes/origin/HEAD", "refs/heads/main", "refs/heads/master"):
        try:
            git(repo, "rev-parse", "--verify", "--quiet", candidate)
            return candidate.removeprefix("refs/heads/").removeprefix("refs/remotes/")
        except GitError:
            continue
    return "HEAD~1"


def base_commit(repo: Path, base: str | None) -> tuple[str, str]:
    """The name and commit of ``--base``, or of the default base; a UsageError naming what was tried."""
    if base is not None:
        return base, commit_of(repo, base, "--base")
    default = default_base(repo)
    try:
        return default, commit_of(repo, default, "--base")
    except UsageError:
        raise UsageError(
            "no base to compare with: no origin/HEAD, main or master branch, and HEAD has no parent; "
            "name one with --base REF"
        ) from None


def config_commit(repo: Path, head_sha: str, base_sha: str | None) -> str:
    """The commit whose config rules a check: the merge base of head with the base, as the App
    reads the base branch's, so a change cannot raise its own limits or turn the network on.

    Without a base (a coverage map of a commit) it is the commit itself; without a merge base
    (unrelated histories), the base commit.
    """
    if base_sha is None:
        return head_sha
    try:
        return git(repo, "merge-base", head_sha, base_sha) or base_sha
    except GitError:
        return base_sha


def _config_text(repo: Path, sha: str) -> str | None:
    """The config at ``sha``, from git's objects: a link committed in its place is refused."""
    try:
        return gitdiff.read_file(repo, sha, CONFIG_PATH)
    except gitdiff.UnsafeFileError as exc:
        raise UsageError(str(exc)) from None


def load_local_config(
    repo: Path, head_sha: str, config_file: Path | None, base_sha: str | None = None
) -> tuple[RepoConfig, str]:
    """The config and a line saying where it came from (printed, so nobody wonders which applied)."""
    if config_file is not None:
        try:
            given = config_file.read_text()
        except OSError as exc:
            raise UsageError(f"--config {config_file}: {exc.strerror}") from None
        return parse_repo_config(given, str(config_file)), f"config: {config_file} (--config)"
    sha = config_commit(repo, head_sha, base_sha)
    text = _config_text(repo, sha)
    where = (
        f"config: {CONFIG_PATH} of {sha[:12]}"
        if text is not None
        else f"config: defaults ({sha[:12]} has no {CONFIG_PATH})"
    )
    if sha != head_sha and gitdiff.read_files(repo, head_sha, [CONFIG_PATH])[CONFIG_PATH] != text:
        where += (
            f"; the change's own edits to {CONFIG_PATH} are not used, as on GitHub "
            "(--config FILE uses a file of yours)"
        )
    return parse_repo_config(text), where


def check_policy(mode: RunnerMode) -> RunnerPolicy:
    """`check` runs the user's own checkout: the host is allowed, but never silently."""
    return RunnerPolicy(
        mode=mode, host="any", asked_by="--runner", image_hint=CHECK_IMAGE_HINT, engine_hint=CHECK_ENGINE_HINT
    )


def announcing(factory: RunnerFactory) -> RunnerFactory:
    """Say where the code runs before any of it does; the host most plainly of all."""

    async def make(request: RunnerRequest) -> Runner:
        try:
            runner = await factory(request)
        except RunnerError as exc:
            print(f"runner: none: {exc}", file=sys.stderr)
            raise
        info = runner.info
        if info.kind == "host":
            print(
                f"runner: host: the checked code runs on this machine, as you, without a container "
                f"({info.reason}); --runner docker requires a container",
                file=sys.stderr,
            )
        else:
            print(f"runner: {info.kind} ({info.reason})", file=sys.stderr)
        return runner

    return make


def in_own_environment(factory: RunnerFactory, base: BaseInterpreter) -> RunnerFactory:
    """Each host run in a throwaway environment layered on ``base``, made for the commit; the
    contributor's own environment is never written (runner/backends/localenv.py)."""

    async def make(request: RunnerRequest) -> Runner:
        runner = await factory(request)
        if not isinstance(runner, HostRunner):
            return runner  # a container already runs in the image's own environment
        root = cache_root()
        chosen = with_configured(base, request.environment.python, request.environment.name)
        return RunEnvRunner(
            runner, chosen, root / "envs", root / "builds", say=lambda line: print(line, file=sys.stderr)
        )

    return make


def local_runners(mode: RunnerMode, python: str | None = None) -> RunnerFactory:
    """The runners of the local commands: said before anything runs, the host in its own environment."""
    import os

    from runner.backends.choice import runner_factory
    from runner.backends.localenv import LocalEnvError, choose_base

    try:
        base = choose_base(python, os.environ)
    except LocalEnvError as exc:
        raise UsageError(str(exc)) from None
    return in_own_environment(announcing(runner_factory(check_policy(mode))), base)


async def run_local_check(
    repo: Path,
    *,
    base: str | None,
    head: str,
    runner_factory: RunnerFactory,
    environment: str | None = None,
    config_file: Path | None = None,
    pr_body: str = "",
    work_dir: Path | None = None,
    image: str | None = None,
    gpus: str | int | list[str] | None = None,
    kind: RunKind = RunKind.PULL_REQUEST,
) -> RunReport:
    """Run the pipeline on ``head`` of a local checkout.

    A PULL_REQUEST run checks the change from ``base``; a BASELINE run records ``head``'s per-test
    coverage map where later checks and `paritybot select-tests` find it (:func:`coverage_dir`).
    """
    repo = open_checkout(repo)
    head_sha = commit_of(repo, head, "--head" if kind == RunKind.PULL_REQUEST else "--rev")
    base_name, base_sha = base_commit(repo, base) if kind == RunKind.PULL_REQUEST else (None, None)
    if git(repo, "status", "--porcelain", "--untracked-files=no"):
        print("note: uncommitted changes are not checked; commit them to include them", file=sys.stderr)
    try:
        config, config_source = load_local_config(repo, head_sha, config_file, base_sha)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    print(config_source, file=sys.stderr)
    env = config.environment(environment) if environment else config.default_environment()
    if env is None:
        names = ", ".join(e.name for e in config.environments)
        raise UsageError(f"unknown environment {environment!r}; the config defines: {names}")
    if image is not None or gpus is not None:
        # An ad-hoc environment: the chosen one, in another image or with other GPUs.
        update: dict[str, object] = {"image": image} if image is not None else {}
        if gpus is not None:
            update["gpus"] = gpus
        try:
            env = Environment.model_validate(env.model_dump() | update)
        except ValidationError as exc:
            raise UsageError("; ".join(format_config_errors(exc))) from None
    request = RunRequest(
        kind=kind,
        repo=repo.name,
        clone_url=str(repo),
        head_sha=head_sha,
        base_sha=base_sha,
        pr_body=pr_body,
        trigger="paritybot check",
    )
    # One cached clone per checkout: a run fetches only what it lacks, and its working tree is
    # removed when it ends.
    root = work_dir or cache_dir(repo)
    deps = PipelineDeps(
        runner_factory=runner_factory,
        workspace_root=root / "runs",
        cache_root=root,
        coverage_dir=coverage_dir(repo, root),
        precommit_home=_precommit_home(),
    )
    report = await Pipeline(request, config, env, uuid.uuid4().hex[:12], deps).execute()
    if report.nothing_to_check:
        print(
            f"nothing to check: {head} has no change from {base_name}; commit a change, "
            "or compare with another --base REF",
            file=sys.stderr,
        )
    return report


def _precommit_home() -> Path | None:
    """The contributor's PRE_COMMIT_HOME, when set: pre-commit's hooks already installed there are
    used as they are, without network (a run on the host only)."""
    home = os.environ.get("PRE_COMMIT_HOME")
    return Path(home).expanduser() if home else None


def render_local(report: RunReport) -> tuple[str, int]:
    """The PR comment's markdown, and the exit code: 0 pass (or nothing to check), 1 the change fails
    a check, 2 broken."""
    markdown = render_comment(report, stage=Stage.DONE, local=True)
    outcome = verdict(report)
    passing = (Verdict.PASS, Verdict.FLAKY_ONLY, Verdict.NOTHING_TO_CHECK)
    code = 0 if outcome in passing else 1 if outcome == Verdict.FAIL else 2
    return markdown, code


def not_caused_line(report: RunReport, code: int) -> str | None:
    """A line for the terminal when failures this change did not cause left the exit code at 0."""
    tests = report.tests
    pre = pre_existing_failures(tests) if tests is not None else []
    if tests is None or not pre:
        return None
    what = f"{len(pre)} failing test{'s' if len(pre) != 1 else ''} not caused by this change"
    if code == 0:
        return (
            f"{what} (already failing on the base, or known flaky): exit code 0 (tests.pre_existing: neutral)"
        )
    return f"{what}; see the report"
