"""The pre-commit check: the repository's own hooks, on the pull request's changed files only.

One step runs ``pre-commit run --from-ref <merge-base> --to-ref <head> --show-diff-on-failure`` in
the workspace the runner gives (a scratch clone, never the user's checkout) and then puts back the
files the hooks rewrote, so later steps test the code as pushed. Parsing the output into per-hook
results and deciding the status are plain functions on the step's result.

Hook environments are cached in ``PRE_COMMIT_HOME``, one directory per (config, image): a new
config or image starts clean, and a warm cache needs no network.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from bot.models import CheckStatus, HookResult, HookStatus, PrecommitResult
from runner.base import SCRATCH_DIR, Runner, RunnerInfo, Step, StepResult, cap_output

log = structlog.get_logger(__name__)

CONFIG_FILE = ".pre-commit-config.yaml"
FILES_OUT = f"{SCRATCH_DIR}/precommit-files"
MARK = "paritybot:"
NOT_INSTALLED_EXIT = 127
PRECONDITION_EXIT = 125
MAX_HOOK_LINES = 40
MAX_FIX_FILES = 50
DIFF_HEADER = "All changes made by hooks:"

# Positional parameters: $1 base, $2 head, $3 where to write the changed files (NUL-separated).
# pre-commit may be a console script or only a module, depending on how the image installed it.
_SCRIPT = f"""
base=$1 head=$2 files_out=$3
if command -v pre-commit >/dev/null 2>&1; then set -- pre-commit
elif python -c 'import pre_commit' >/dev/null 2>&1; then set -- python -m pre_commit
elif python3 -c 'import pre_commit' >/dev/null 2>&1; then set -- python3 -m pre_commit
else echo "{MARK} pre-commit not found"; exit {NOT_INSTALLED_EXIT}; fi
for ref in "$base" "$head"; do
  if ! git cat-file -e "$ref^{{commit}}" 2>/dev/null; then
    echo "{MARK} commit $ref is not in the workspace"; exit {PRECONDITION_EXIT}
  fi
done
if [ "$(git rev-parse HEAD)" != "$(git rev-parse "$head^{{commit}}")" ]; then
  echo "{MARK} the workspace is checked out at $(git rev-parse HEAD), not at $head"; exit {PRECONDITION_EXIT}
fi
if ! mb=$(git merge-base "$base" "$head" 2>/dev/null); then
  echo "{MARK} no merge base of $base and $head (shallow clone?); comparing with $base itself"
  mb=$base
fi
echo "{MARK} merge base $mb"
mkdir -p "$(dirname "$files_out")"
git diff --name-only --no-renames --diff-filter=d -z "$mb" "$head" > "$files_out"
dirty=$(git status --porcelain --untracked-files=no)
"$@" run --from-ref "$mb" --to-ref "$head" --show-diff-on-failure --color never --verbose
rc=$?
# Put back what the hooks rewrote (only in a tree that was clean: never lose someone's edits).
if [ -z "$dirty" ]; then git checkout -q -- .; fi
exit $rc
"""


def precommit_cache_key(config_text: str, image_key: str) -> str:
    """Directory name for hook environments built from this config in this image."""
    digest = hashlib.sha256(f"{image_key}\0{config_text}".encode()).hexdigest()
    return f"pc-{digest[:24]}"


def image_key(info: RunnerInfo) -> str:
    """What the hook environments were built against: the image, or the host."""
    return info.image_digest or info.image_ref or info.image or "host"


def precommit_step(base: str, head: str, *, pre_commit_home: str, timeout_s: float, network: bool) -> Step:
    env = {
        "PRE_COMMIT_HOME": pre_commit_home,
        # A container user rarely owns the mounted workspace; git would refuse it as "dubious".
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "safe.directory",
        "GIT_CONFIG_VALUE_0": "*",
    }
    if not network:
        # The container runner cuts the network itself; this also makes pip fail at once (instead
        # of retrying for minutes) wherever it cannot be cut, e.g. on the host runner.
        env["PIP_NO_INDEX"] = "1"
    return Step(
        name="pre-commit",
        argv=["sh", "-c", _SCRIPT, "pre-commit-step", base, head, FILES_OUT],
        env=env,
        timeout_s=timeout_s,
        network=network,
        collect=[FILES_OUT],
    )


# --- parsing the output ------------------------------------------------------------------------------

_STATUS_LINE = re.compile(r"^(?P<name>.+?)\.{3,}(?:\((?P<note>[^()]*)\))?(?P<status>Passed|Failed|Skipped)$")
_DETAIL_LINE = re.compile(r"^- (hook id|exit code|duration): (.*)$")
_MODIFIED_LINE = "- files were modified by this hook"
_ERROR_LINE = re.compile(r"^An (unexpected )?error has occurred")


@dataclass
class ParsedHook:
    name: str
    status: HookStatus
    id: str | None = None
    files_modified: bool = False
    exit_code: int | None = None
    lines: list[str] = field(default_factory=list)


@dataclass
class ParsedRun:
    hooks: list[ParsedHook]
    diff: str
    errors: list[str]
    notes: list[str]
    merge_base: str | None
    log: str


def parse_output(output: str) -> ParsedRun:
    """Split pre-commit's output into hooks, the diff they would apply and any error."""
    log_part, _, diff = output.partition(f"\n{DIFF_HEADER}\n")
    if not diff and output.startswith(f"{DIFF_HEADER}\n"):
        log_part, diff = "", output[len(DIFF_HEADER) + 1 :]
    hooks: list[ParsedHook] = []
    errors: list[str] = []
    notes: list[str] = []
    merge_base = None
    lines = log_part.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith(MARK):
            note = line[len(MARK) :].strip()
            if note.startswith("merge base "):
                merge_base = note.removeprefix("merge base ").strip()
            else:
                notes.append(note)
            continue
        if _ERROR_LINE.match(line):
            # pre-commit's own error: its message and the command output it quotes follow.
            errors = [line, *lines[i : i + 25]]
            break
        match = _STATUS_LINE.match(line)
        if match:
            hooks.append(ParsedHook(name=match["name"], status=HookStatus(match["status"].lower())))
            continue
        if hooks:
            _add_detail(hooks[-1], line)
    return ParsedRun(hooks, _clean_diff(diff), errors, notes, merge_base, log_part)


def _add_detail(hook: ParsedHook, line: str) -> None:
    detail = _DETAIL_LINE.match(line)
    if detail and detail[1] == "hook id":
        hook.id = detail[2].strip()
    elif detail and detail[1] == "exit code":
        hook.exit_code = int(detail[2]) if detail[2].strip().lstrip("-").isdigit() else None
    elif detail:
        return  # the duration does not help anyone fix anything
    elif line == _MODIFIED_LINE:
        hook.files_modified = True
    elif not line.startswith("[INFO]"):
        hook.lines.append(line)


def _clean_diff(diff: str) -> str:
    # pre-commit may log after the diff (restoring stashed changes); those lines are not the diff.
    kept = diff.splitlines()
    while kept and (kept[-1].startswith(("[INFO]", "[WARNING]", MARK)) or not kept[-1].strip()):
        kept.pop()
    return "\n".join(kept) + "\n" if kept else ""


def _trim(lines: list[str], limit: int = MAX_HOOK_LINES) -> str:
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    if len(lines) > limit:
        lines = [*lines[:limit], f"… {len(lines) - limit} more lines"]
    return "\n".join(lines)


# --- deciding --------------------------------------------------------------------------------------


def hook_results(parsed: ParsedRun, name_to_id: dict[str, str]) -> list[HookResult]:
    results = []
    for hook in parsed.hooks:
        failed = hook.status == HookStatus.FAILED
        results.append(
            HookResult(
                id=hook.id or name_to_id.get(hook.name, hook.name),
                name=hook.name,
                status=hook.status,
                files_modified=hook.files_modified,
                # Passing hooks' chatter (we run with --verbose for the ids) helps no one.
                output=_trim(hook.lines) if failed else "",
            )
        )
    return results


def fix_command(failed_ids: list[str], files: list[str], merge_base: str, head: str) -> str:
    """What the author runs in their checkout to apply the fixes and see what is left."""
    hook = [failed_ids[0]] if len(set(failed_ids)) == 1 else []
    if not files or len(files) > MAX_FIX_FILES:
        return shlex.join(["pre-commit", "run", *hook, "--from-ref", merge_base, "--to-ref", head])
    return shlex.join(["pre-commit", "run", *hook, "--files", *files])


def decide(
    result: StepResult,
    changed_files: list[str],
    name_to_id: dict[str, str],
    base: str,
    head: str,
    where: str,
    network: bool,
) -> PrecommitResult:
    """The check's result from the step's result; ``where`` names the image or host for messages."""
    if result.cancelled:
        return PrecommitResult(status=CheckStatus.CANCELLED, message="pre-commit: cancelled")
    if result.error or result.timed_out or result.oom_killed or result.stopped_by_limit:
        return PrecommitResult(
            status=CheckStatus.ERROR,
            message=result.describe_failure(),
            output=cap_output(result.output, 50_000),
        )
    parsed = parse_output(result.output)
    output = cap_output(parsed.log, 50_000)
    if result.exit_code == NOT_INSTALLED_EXIT and "pre-commit not found" in parsed.notes:
        return PrecommitResult(
            status=CheckStatus.ERROR,
            message=f"pre-commit is not installed in {where}; add it to the image or disable the check",
            output=output,
        )
    if result.exit_code == PRECONDITION_EXIT and parsed.notes:
        return PrecommitResult(status=CheckStatus.ERROR, message="; ".join(parsed.notes), output=output)
    hooks = hook_results(parsed, name_to_id)
    failed = [h for h in hooks if h.status == HookStatus.FAILED]
    if parsed.errors:
        return PrecommitResult(
            status=CheckStatus.ERROR,
            hooks=hooks,
            message=_error_message(parsed.errors, network),
            output=output,
        )
    if failed:
        names = ", ".join(h.id for h in failed)
        return PrecommitResult(
            status=CheckStatus.FAILED,
            hooks=hooks,
            fix_command=fix_command([h.id for h in failed], changed_files, parsed.merge_base or base, head),
            diff=parsed.diff,
            output=output,
            message=f"{len(failed)} of {len(hooks)} hooks failed: {names}",
        )
    if result.exit_code != 0:
        tail = "\n".join(result.output.strip().splitlines()[-15:])
        return PrecommitResult(
            status=CheckStatus.ERROR,
            hooks=hooks,
            message=f"pre-commit exited with {result.exit_code} and no hook failed:\n{tail}",
            output=output,
        )
    ran = sum(1 for h in hooks if h.status == HookStatus.PASSED)
    message = f"{ran} hooks passed" if ran else "no hook applies to the changed files"
    return PrecommitResult(status=CheckStatus.PASSED, hooks=hooks, output=output, message=message)


def _error_message(errors: list[str], network: bool) -> str:
    lines = [line for line in errors if line.strip()][:15]
    text = "\n".join(lines)
    if not network and ("install" in text or "CalledProcessError" in text):
        text += (
            "\nThe pre-commit step runs without network here, so hook environments that are not "
            "cached yet cannot be installed; allow network for pre-commit "
            "(environments[].network.precommit) or warm the cache."
        )
    return text


def hook_names(config_text: str) -> dict[str, str]:
    """Hook name → id for hooks that set a name in the config (pre-commit only prints ids on failure)."""
    import yaml  # only needed here; keeps module import light for the pipeline

    try:
        data = yaml.safe_load(config_text)
    except yaml.YAMLError:
        return {}  # pre-commit itself reports the bad config, with a better message
    names: dict[str, str] = {}
    repos = data.get("repos") if isinstance(data, dict) else None
    for repo in repos if isinstance(repos, list) else []:
        hooks = repo.get("hooks") if isinstance(repo, dict) else None
        for hook in hooks if isinstance(hooks, list) else []:
            if isinstance(hook, dict) and isinstance(hook.get("id"), str):
                names.setdefault(str(hook.get("name", hook["id"])), hook["id"])
    return names


# --- the edge --------------------------------------------------------------------------------------


def default_cache_root(info: RunnerInfo) -> str:
    """Where hook environments persist. On the host: the user's cache directory. In a container
    the host path means nothing, so the cache lives in the workspace (kept for this run only)
    unless the caller passes a ``cache_root`` that the backend mounts.
    """
    if info.kind == "host":
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        return str(base / "paritybot" / "pre-commit")
    return f"{SCRATCH_DIR}/pre-commit-home"


async def run_precommit(
    runner: Runner,
    workspace: Path,
    base: str,
    head: str,
    env_name: str,
    timeout_s: float,
    network: bool,
    *,
    cache_root: str | None = None,
) -> PrecommitResult:
    """Run the repository's pre-commit hooks on the changes between ``base`` and ``head``."""
    config = workspace / CONFIG_FILE
    if not config.is_file():
        return _not_configured(workspace)
    config_text = config.read_text(errors="replace")
    info = runner.info
    key = precommit_cache_key(config_text, image_key(info))
    home = f"{(cache_root or default_cache_root(info)).rstrip('/')}/{key}"
    step = precommit_step(base, head, pre_commit_home=home, timeout_s=timeout_s, network=network)
    log.info("pre-commit starting", environment=env_name, cache=key, network=network)
    result = await runner.run(step, workspace)
    files = [f for f in result.collected.get(FILES_OUT, "").split("\0") if f]
    where = f"image {info.image}" if info.image else f"the runner's host (environment {env_name})"
    outcome = decide(result, files, hook_names(config_text), base, head, where, network)
    log.info("pre-commit finished", status=outcome.status, hooks=len(outcome.hooks))
    return outcome


def _not_configured(workspace: Path) -> PrecommitResult:
    message = f"the repository has no {CONFIG_FILE}"
    if (workspace / ".pre-commit-config.yml").is_file():
        message += " (it has .pre-commit-config.yml, which pre-commit does not read)"
    return PrecommitResult(status=CheckStatus.NOT_CONFIGURED, message=message)
