"""The pre-commit check: the repository's own hooks, on the pull request's changed files only.

A pull request controls its ``.pre-commit-config.yaml`` and the code of its ``repo: local`` hooks,
so every part of the check keeps that code away from what it must not reach, and keeps what it
prints away from the results:

1. The config is read from the head commit's git objects, never from the file system (a symbolic
   link would point into the bot's host), and handed to every step as text.
2. **Install** (:func:`install_step`): ``pre-commit install-hooks`` in a container that holds the
   config and nothing else of the pull request, with the network when the base branch's config
   allows it (``network.precommit_install``, on by default). It is the only step that may write the
   hook environments: they live in a store keyed by the config's exact text and the image, so a run
   only ever uses environments built from its own config.
3. **Classify** (:func:`classify_step`): before any hook runs, pre-commit's own classifier says which
   changed files each hook applies to. No code of the pull request runs in that container, so what
   it writes can be believed: which hooks run, and which are skipped for want of files.
4. **One container per hook** (:func:`hook_step`), without network (``network.precommit``, off by
   default), the store read-only. A hook's result is its container's exit status as the engine
   reports it: nothing a hook prints makes or changes a row. The files it was given are read back
   afterwards (the runner copies them out, running nothing), so which hook changed files and the
   diff of the fixes are computed here from contents.
5. What the hooks rewrote is put back, so later steps test the code as pushed.

The list of hooks comes from the config as parsed here; the parsing of the classifier's answer
and every decision are plain functions.

Why one module past 400 lines: the five steps above are one defence; each step's checks rely on
what the previous one guaranteed, and reading them in one place is how a reviewer sees that no
hook's output can make or change a row.

Longer than most modules: the four steps above share the config's text and the hostile-input
rules, which read best side by side.
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import structlog

from bot.core.models import CheckStatus, HookResult, HookStatus, PrecommitResult
from runner.backends.base import SCRATCH_DIR, Runner, RunnerInfo, Step, StepResult, ToolStore
from runner.checks.precommit_script import INSTALLED_MARK
from runner.git import GitError
from runner.gitdiff import (
    FileStatus,
    UnsafeFileError,
    changed_files,
    merge_base,
    read_file,
    read_files,
    tree_entries,
)
from runner.hints import is_network_error

log = structlog.get_logger(__name__)

CONFIG_FILE = ".pre-commit-config.yaml"
# pre-commit configs are a few kilobytes; the text travels to each step on its command line.
MAX_CONFIG_BYTES = 64 * 1024
WORK_DIR = f"{SCRATCH_DIR}/pre-commit"
FILES_LIST = f"{WORK_DIR}/files"
PLAN_OUT = f"{WORK_DIR}/hooks.json"
STORE_ENV = "PRE_COMMIT_HOME"
NO_MARK_ENV = "PARITYBOT_PRE_COMMIT_NO_MARK"  # the driver leaves a cache it does not own unmarked
NOT_FOUND_MARK = "paritybot: pre-commit not found"
NOT_INSTALLED_EXIT = 127
HOOK_FAILED_EXIT = 1  # pre-commit's status when a hook fails or changes files
MAX_HOOK_LINES = 40
MAX_FIX_FILES = 50
# Files read back after each hook, to see which it changed; the diff covers these.
MAX_COLLECT = 300

# Positional parameters: $1 the driver script, then its arguments. pre-commit may be a console
# script (its interpreter is on the shebang line) or only a module of python3 / python; finding
# the module (without importing it) costs a bare interpreter start.
_FIND_PYTHON = f"""
driver=$1; shift
for py in "$(command -v pre-commit >/dev/null 2>&1 && sed -n '1s/^#![[:space:]]*//p' "$(command -v pre-commit)")" python3 python; do
  if [ -n "$py" ] && $py -I -c 'import importlib.util as u, sys; sys.exit(u.find_spec("pre_commit") is None)' >/dev/null 2>&1; then
    exec $py -I -c "$driver" "$@"
  fi
done
echo "{NOT_FOUND_MARK}"
exit {NOT_INSTALLED_EXIT}
"""
# A store that an earlier run completed needs no install: the step ends before any interpreter starts.
_INSTALL = f'[ -e "${STORE_ENV}/{INSTALLED_MARK}" ] && exit 0\n{_FIND_PYTHON}'

# A container user rarely owns the mounted workspace; git would refuse it as "dubious".
_GIT_ENV = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}


@cache
def driver_source() -> str:
    """The in-container driver (``runner/checks/precommit_script.py``), as shipped in the package."""
    return resources.files("runner.checks").joinpath("precommit_script.py").read_text(encoding="utf-8")


def precommit_store_key(config_text: str, image_key: str) -> str:
    """The store of hook environments built from exactly this config in this image."""
    digest = hashlib.sha256(f"{image_key}\0{config_text}".encode()).hexdigest()
    return f"pc-{digest[:24]}"


def image_key(info: RunnerInfo) -> str:
    """What the hook environments were built against: the image, or the host."""
    return info.image_digest or info.image_ref or info.image or "host"


# --- the steps -------------------------------------------------------------------------------------


def _offline(network: bool) -> dict[str, str]:
    # Without network pip would retry for minutes; this makes it fail at once, also where the
    # network cannot be cut (the host runner).
    return {} if network else {"PIP_NO_INDEX": "1"}


def install_step(config_text: str, store_key: str, timeout_s: float, network: bool) -> Step:
    return Step(
        name="pre-commit-install",
        argv=["sh", "-c", _INSTALL, "pre-commit-install", driver_source(), "install", config_text],
        env=_offline(network),
        timeout_s=timeout_s,
        network=network,
        scratch=True,
        store=ToolStore(key=store_key, env=STORE_ENV, writable=True),
    )


def classify_step(config_text: str, store_key: str, files: list[str], timeout_s: float) -> Step:
    driver_args = ["classify", config_text, FILES_LIST, PLAN_OUT]
    return Step(
        name="pre-commit-classify",
        argv=["sh", "-c", _FIND_PYTHON, "pre-commit-classify", driver_source(), *driver_args],
        env={**_GIT_ENV, **_offline(False)},
        timeout_s=timeout_s,
        inject={FILES_LIST: "\0".join(files)},
        collect=[PLAN_OUT],
        store=ToolStore(key=store_key, env=STORE_ENV),
    )


def hook_step(
    python: str,
    config_text: str,
    store_key: str,
    hook: PlannedHook,
    timeout_s: float,
    network: bool,
    collect: list[str],
) -> Step:
    """``collect``: files to read back afterwards, to see what the hook changed."""
    return Step(
        name=f"pre-commit hook {hook.id}",
        argv=[python, "-I", "-c", driver_source(), "run", config_text, hook.id, FILES_LIST],
        env={**_GIT_ENV, **_offline(network)},
        timeout_s=timeout_s,
        network=network,
        inject={FILES_LIST: "\0".join(hook.files)},
        collect=collect,
        store=ToolStore(key=store_key, env=STORE_ENV),
    )


def put_back_step(timeout_s: float) -> Step:
    # The workspace is always the run's own clone, so every change in it is a hook's.
    return Step(
        name="pre-commit-put-back",
        argv=["git", "checkout", "-q", "--", "."],
        env=_GIT_ENV,
        timeout_s=timeout_s,
    )


# --- the plan: which hooks run, on which files ------------------------------------------------------


@dataclass(frozen=True)
class PlannedHook:
    """The hooks of one id (``pre-commit run ID`` runs them all), with the files they apply to."""

    id: str
    name: str
    files: tuple[str, ...]
    always_run: bool = False
    fail_fast: bool = False

    @property
    def applies(self) -> bool:
        return bool(self.files) or self.always_run


@dataclass(frozen=True)
class Plan:
    python: str  # pre-commit's interpreter, as the classifier found it
    hooks: tuple[PlannedHook, ...] = ()
    fail_fast: bool = False


class PlanError(Exception):
    """The classifier's answer is missing or does not match the config."""


def config_hook_ids(config_text: str) -> list[str]:
    """Every hook id of the config, in order; the rows of the check are these hooks."""
    import yaml  # only needed here; keeps module import light for the pipeline

    try:
        data = yaml.safe_load(config_text)
    except yaml.YAMLError as exc:
        raise PlanError(f"{CONFIG_FILE} is not valid YAML: {exc}") from None
    repos = data.get("repos") if isinstance(data, dict) else None
    ids = []
    for repo in repos if isinstance(repos, list) else []:
        hooks = repo.get("hooks") if isinstance(repo, dict) else None
        for hook in hooks if isinstance(hooks, list) else []:
            if isinstance(hook, dict) and isinstance(hook.get("id"), str):
                ids.append(hook["id"])
    return ids


def read_plan(text: str | None, files: list[str], config_ids: list[str]) -> Plan:
    """The classifier's JSON as a plan: hooks of the commit stage, grouped by id in config order.

    Raises:
        PlanError: no answer, or one that names other hooks than the config does.
    """
    if text is None:
        raise PlanError("pre-commit's classifier wrote no answer")
    try:
        data = json.loads(text)
        found = [
            (h["id"], h["name"], h["runs"], h["always_run"], h["fail_fast"], h["files"])
            for h in data["hooks"]
        ]
        python, fail_fast = str(data["python"]), bool(data["fail_fast"])
    except (ValueError, KeyError, TypeError) as exc:
        raise PlanError(f"pre-commit's classifier wrote an answer that is not understood: {exc}") from None
    if [f[0] for f in found] != config_ids:
        raise PlanError(
            f"pre-commit read other hooks from {CONFIG_FILE} ({', '.join(f[0] for f in found)}) "
            f"than paritybot did ({', '.join(config_ids)})"
        )
    grouped: dict[str, PlannedHook] = {}
    for hook_id, name, runs, always_run, hook_fail_fast, mask in found:
        if not runs:
            continue  # a hook of another stage (manual, pre-push): `pre-commit run` leaves it out
        chosen = tuple(f for f, bit in zip(files, str(mask), strict=False) if bit == "1")
        seen = grouped.get(hook_id)
        if seen is not None:
            chosen = tuple(dict.fromkeys((*seen.files, *chosen)))
            always_run, hook_fail_fast = always_run or seen.always_run, hook_fail_fast or seen.fail_fast
            name = seen.name
        grouped[hook_id] = PlannedHook(hook_id, str(name), chosen, bool(always_run), bool(hook_fail_fast))
    return Plan(python=python, hooks=tuple(grouped.values()), fail_fast=fail_fast)


# --- deciding --------------------------------------------------------------------------------------

# pre-commit's own lines around a hook's output: they say nothing the row does not.
_STATUS_LINE = re.compile(r"^.+?\.{3,}(?:\([^()]*\))?(?:Passed|Failed|Skipped)$")
_DETAIL_LINE = re.compile(r"^- (hook id|exit code|duration): |^- files were modified by this hook$")


def hook_output(result: StepResult) -> str:
    """A failed hook's output for people: pre-commit's status and detail lines left out, trimmed."""
    if result.timed_out or result.oom_killed or result.error or result.stopped_by_limit:
        return result.describe_failure()
    lines = [
        line
        for line in result.output.splitlines()
        if not (
            _STATUS_LINE.match(line) or _DETAIL_LINE.match(line) or line.startswith(("[INFO]", "[WARNING]"))
        )
    ]
    return _trim(lines)


def _trim(lines: list[str], limit: int = MAX_HOOK_LINES) -> str:
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    if len(lines) > limit:
        lines = [*lines[:limit], f"… {len(lines) - limit} more lines"]
    return "\n".join(lines)


def hook_broke(result: StepResult) -> bool:
    """Whether the hook's container ended without pre-commit's verdict (0 or 1) on the hook."""
    stopped = result.error or result.timed_out or result.oom_killed or result.stopped_by_limit
    return bool(stopped) or result.exit_code not in (
        0,
        HOOK_FAILED_EXIT,
    )


def hook_result(hook: PlannedHook, result: StepResult | None, files_modified: bool) -> HookResult:
    """One row: skipped when it did not run, else passed exactly when its container exited 0."""
    if result is None:
        return HookResult(id=hook.id, name=hook.name, status=HookStatus.SKIPPED)
    passed = result.exit_code == 0 and not hook_broke(result)
    return HookResult(
        id=hook.id,
        name=hook.name,
        status=HookStatus.PASSED if passed else HookStatus.FAILED,
        files_modified=files_modified,
        output="" if passed else hook_output(result),
    )


def to_collect(hook: PlannedHook, before: dict[str, str | None]) -> list[str]:
    """The files read back after ``hook``: those it was given that the bot read at the head commit
    (not links, not oversized files), at most MAX_COLLECT."""
    return [f for f in hook.files if before.get(f) is not None][:MAX_COLLECT]


def changed_contents(current: dict[str, str | None], paths: list[str], collected: dict[str, str]) -> bool:
    """Take the contents read back after a hook into ``current``; whether any of them changed.

    A path that was not read back is gone or no longer a regular file: changed too.
    """
    changed = False
    for path in paths:
        after = collected.get(path)
        if after != current.get(path):
            current[path] = after
            changed = True
    return changed


def fixes_diff(before: dict[str, str | None], after: dict[str, str | None]) -> str:
    """A git-style diff of what the hooks changed, from contents (never from a hook's output)."""
    chunks = []
    for path in sorted(after):
        old, new = before.get(path), after[path]
        if old == new or old is None:
            continue
        header = f"diff --git a/{path} b/{path}\n"
        target = f"b/{path}" if new is not None else "/dev/null"
        lines = difflib.unified_diff(
            old.splitlines(keepends=True), (new or "").splitlines(keepends=True), f"a/{path}", target
        )
        body = "".join(
            line if line.endswith("\n") else f"{line}\n\\ No newline at end of file\n" for line in lines
        )
        chunks.append(header + body)
    return "".join(chunks)


def fix_command(failed_ids: list[str], files: list[str], merge_base: str, head: str) -> str:
    """What the author runs in their checkout to apply the fixes and see what is left."""
    hook = [failed_ids[0]] if len(set(failed_ids)) == 1 else []
    if not files or len(files) > MAX_FIX_FILES:
        return shlex.join(["pre-commit", "run", *hook, "--from-ref", merge_base, "--to-ref", head])
    return shlex.join(["pre-commit", "run", *hook, "--files", *files])


def summarize(
    rows: list[HookResult], broken: tuple[str, StepResult] | None, diff: str, change: Change, head: str
) -> PrecommitResult:
    """The check's result from its rows; ``broken`` is the hook whose container gave no verdict."""
    if broken is not None:
        hook_id, result = broken
        stopped = result.error or result.timed_out or result.oom_killed or result.stopped_by_limit
        why = result.describe_failure() if stopped else f"pre-commit exited with {result.exit_code}"
        return PrecommitResult(
            status=CheckStatus.ERROR,
            hooks=rows,
            message=f"hook {hook_id} did not finish: {why}",
            output=result.output,
        )
    failed = [h for h in rows if h.status == HookStatus.FAILED]
    if failed:
        ids = [h.id for h in failed]
        return PrecommitResult(
            status=CheckStatus.FAILED,
            hooks=rows,
            fix_command=fix_command(ids, change.files, change.merge_base, head),
            diff=diff,
            message=f"{len(failed)} of {len(rows)} hooks failed: {', '.join(ids)}",
        )
    ran = sum(1 for h in rows if h.status == HookStatus.PASSED)
    message = f"{ran} hooks passed" if ran else "no hook applies to the changed files"
    return PrecommitResult(status=CheckStatus.PASSED, hooks=rows, message=message)


def step_problem(result: StepResult, doing: str, where: str, network: bool | None) -> PrecommitResult | None:
    """The check's result when the install or classify step did not succeed; None when it did."""
    if result.cancelled:
        return PrecommitResult(status=CheckStatus.CANCELLED, message="pre-commit: cancelled")
    if result.ok:
        return None
    # The marker is the first thing the step prints, before pre-commit or anything it installs runs.
    if result.exit_code == NOT_INSTALLED_EXIT and result.output.startswith(NOT_FOUND_MARK):
        return PrecommitResult(
            status=CheckStatus.ERROR,
            message=f"pre-commit is not installed in {where}; add it to the image or disable the check",
        )
    tail = "\n".join(line for line in result.output.strip().splitlines()[-15:] if line.strip())
    message = f"pre-commit failed {doing} ({result.describe_failure()})"
    if network is not None and is_network_error(result.output):
        # Said first, in whole sentences: the check run's title is this message's first line.
        message = offline_install_message(network) + f"\n\n{message}"
    if tail:
        message += f":\n{tail}"
    return PrecommitResult(status=CheckStatus.ERROR, message=message, output=result.output)


def offline_install_message(network: bool) -> str:
    """What happened when pre-commit could not download its hooks, and the two ways on."""
    why = (
        "this environment installs them without network (the base branch's config sets "
        "environments[].network.precommit_install to false)"
        if not network
        else "no network was reachable"
    )
    return (
        f"pre-commit could not install its hooks: they are downloaded, and {why}. "
        "To go on, skip pre-commit with `checks: {precommit: false}` in .github/paritybot.yml "
        "(or a file given with `paritybot check --config`), or, for `paritybot check --runner host`, "
        f"set {STORE_ENV} to a pre-commit cache where these hooks are already installed "
        "(pre-commit's default is ~/.cache/pre-commit) to use it."
    )


# --- reading the change, from git's objects -------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    merge_base: str
    files: list[str]  # changed and not deleted, head-side paths


class ChangeError(Exception):
    pass


def read_change(workspace: Path, base: str, head: str) -> Change:
    """The merge base and the files the pull request changes, from the run's own clone.

    Raises:
        ChangeError: a commit is not in the workspace.
    """
    for rev in (base, head):
        try:
            read_files(workspace, rev, [])
        except GitError:
            raise ChangeError(f"commit {rev} is not in the workspace") from None
    try:
        base_point = merge_base(workspace, base, head)
    except GitError:
        base_point = base  # a shallow clone: compare with the base itself, as the diff would
    files = [f.path for f in changed_files(workspace, base_point, head) if f.status != FileStatus.DELETED]
    return Change(merge_base=base_point, files=files)


# Names a project may have given its pre-commit config: pointed out, with the setting that reads it.
OTHER_NAMES = [".pre-commit-config.yml", "pre-commit.yaml", "pre-commit-config.yaml", ".pre-commit.yaml"]


def not_configured_message(workspace: Path, head: str, config_file: str = CONFIG_FILE) -> str:
    message = f"the repository has no {config_file}"
    found = [n for n in OTHER_NAMES if n != config_file and n in tree_entries(workspace, head, OTHER_NAMES)]
    if found:
        message += (
            f" (it has {found[0]}: set `precommit: {{config: {found[0]}}}` in .github/paritybot.yml "
            "to use it)"
        )
    return message


def with_home(step: Step, home: Path | None) -> Step:
    """The step on the contributor's own pre-commit cache instead of the run's store (a local run
    on the host): where its hooks are installed already, no network is needed. Nothing marks that
    cache as complete for this config, as the run's own store is: it is shared with other configs."""
    if home is None:
        return step
    return step.model_copy(
        update={"store": None, "env": {**step.env, STORE_ENV: str(home), NO_MARK_ENV: "1"}}
    )


# --- the edge --------------------------------------------------------------------------------------


async def run_precommit(
    runner: Runner,
    workspace: Path,
    base: str,
    head: str,
    env_name: str,
    timeout_s: float,
    *,
    install_network: bool = True,
    hook_network: bool = False,
    config_file: str = CONFIG_FILE,
    home: Path | None = None,
) -> PrecommitResult:
    """Run the repository's pre-commit hooks on the changes between ``base`` and ``head``.

    ``config_file``: the config's path (``precommit.config``); ``home``: a pre-commit cache of the
    contributor's own to use instead of the run's store (:func:`with_home`).
    """
    try:
        config_text = await asyncio.to_thread(
            read_file, workspace, head, config_file, max_bytes=MAX_CONFIG_BYTES
        )
        if config_text is None:
            message = await asyncio.to_thread(not_configured_message, workspace, head, config_file)
            return PrecommitResult(status=CheckStatus.NOT_CONFIGURED, message=message)
        change = await asyncio.to_thread(read_change, workspace, base, head)
        config_ids = config_hook_ids(config_text)
    except (UnsafeFileError, ChangeError, PlanError) as exc:
        return PrecommitResult(status=CheckStatus.ERROR, message=str(exc))
    except GitError as exc:
        return PrecommitResult(
            status=CheckStatus.ERROR, message=f"commit {head} is not in the workspace: {exc}"
        )
    info = runner.info
    where = f"image {info.image}" if info.image else f"the runner's host (environment {env_name})"
    store_key = precommit_store_key(config_text, image_key(info))
    log.info("pre-commit starting", environment=env_name, store=store_key, install_network=install_network)

    install = with_home(install_step(config_text, store_key, timeout_s, install_network), home)
    installed = await runner.run(install, workspace)
    problem = step_problem(installed, "installing the hook environments", where, install_network)
    if problem is not None:
        return problem
    classify = with_home(classify_step(config_text, store_key, change.files, timeout_s), home)
    classified = await runner.run(classify, workspace)
    problem = step_problem(classified, "reading which files each hook applies to", where, None)
    if problem is not None:
        return problem
    refused = classified.refusal(PLAN_OUT, "pre-commit's classifier answer")
    if refused:
        return PrecommitResult(status=CheckStatus.ERROR, message=refused, output=classified.output)
    try:
        plan = read_plan(classified.collected.get(PLAN_OUT), change.files, config_ids)
    except PlanError as exc:
        return PrecommitResult(status=CheckStatus.ERROR, message=str(exc), output=classified.output)
    skips = {s.strip() for s in info.env.get("SKIP", "").split(",") if s.strip()}

    def step_for(hook: PlannedHook, collect: list[str]) -> Step:
        return with_home(
            hook_step(plan.python, config_text, store_key, hook, timeout_s, hook_network, collect), home
        )

    outcome = await _run_hooks(runner, workspace, plan, change, head, skips, step_for, timeout_s)
    log.info("pre-commit finished", status=outcome.status, hooks=len(outcome.hooks))
    return outcome


async def _run_hooks(
    runner: Runner,
    workspace: Path,
    plan: Plan,
    change: Change,
    head: str,
    skips: set[str],
    step_for: Callable[[PlannedHook, list[str]], Step],
    timeout_s: float,
) -> PrecommitResult:
    """Each hook in its own container, in the config's order; then put back what they changed."""
    before = await asyncio.to_thread(read_files, workspace, head, change.files)
    current = dict(before)
    rows: list[HookResult] = []
    broken: tuple[str, StepResult] | None = None
    stopped = False  # a failed hook with fail_fast: pre-commit runs no more
    for hook in plan.hooks:
        if stopped or hook.id in skips or not hook.applies:
            rows.append(hook_result(hook, None, False))
            continue
        collect = to_collect(hook, before)
        result = await runner.run(step_for(hook, collect), workspace)
        if result.cancelled:
            return PrecommitResult(status=CheckStatus.CANCELLED, hooks=rows, message="pre-commit: cancelled")
        modified = changed_contents(current, collect, result.collected)
        rows.append(hook_result(hook, result, modified))
        if hook_broke(result):
            broken = (hook.id, result)
            break
        stopped = result.exit_code != 0 and (hook.fail_fast or plan.fail_fast)
    diff = fixes_diff(before, current)
    outcome = summarize(rows, broken, diff, change, head)
    if outcome.status != CheckStatus.PASSED or diff:
        restored = await runner.run(put_back_step(timeout_s), workspace)
        if not restored.ok and not restored.cancelled:
            outcome.message += f"\nThe hooks' changes could not be undone: {restored.describe_failure()}"
    return outcome
