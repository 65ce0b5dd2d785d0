"""The RFC checklist: does this PR need design review, and how much of the checklist is done?

Pure decisions on plain inputs — :func:`evaluate_rfc` takes the changed files, labels, the PR
description, the public API changes and the new dependencies, and returns an
:class:`~bot.core.models.RfcReport` whose reasons a reviewer can read ("removes public function
`pkg.mod.old_fn`"). :func:`new_dependencies_between` reads dependency declarations from file
texts. Only :func:`collect_rfc_inputs` touches git, to gather those inputs for a checkout.
"""

from __future__ import annotations

import configparser
import fnmatch
import re
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any

import structlog
from packaging.utils import canonicalize_name

from bot.core.config import RfcSettings
from bot.core.models import RfcItem, RfcReport
from runner import gitdiff
from runner.checks.api_surface import (
    ApiChange,
    ApiObject,
    diff_api,
    is_public_module_path,
    module_name,
    public_api,
)
from runner.gitdiff import ChangedFile, FileStatus

log = structlog.get_logger(__name__)

# A PR that breaks a whole module would otherwise list every object; the first ones tell the story.
MAX_API_REASONS = 10

_CHECKBOX = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\[([ xX])\]\s+(.+?)\s*$")
_WORD = re.compile(r"[a-z0-9]+")


# --- The decision ----------------------------------------------------------------------------------


def evaluate_rfc(
    settings: RfcSettings,
    changed: list[ChangedFile],
    labels: list[str],
    pr_body: str,
    api_changes: list[ApiChange],
    new_dependencies: list[str],
) -> RfcReport:
    """Whether the PR needs the RFC checklist, why, and which items its description ticks.

    Raises:
        ValueError: ``settings.link_pattern`` is not a valid regular expression.
    """
    reasons = rfc_reasons(settings, changed, labels, api_changes, new_dependencies)
    if not reasons:
        return RfcReport(triggered=False)
    items, link = tick_checklist(settings.checklist, pr_body, settings.link_pattern)
    return RfcReport(triggered=True, reasons=reasons, items=items, rfc_link=link)


def rfc_reasons(
    settings: RfcSettings,
    changed: list[ChangedFile],
    labels: list[str],
    api_changes: list[ApiChange],
    new_dependencies: list[str],
) -> list[str]:
    """Every reason this PR needs design review, one human-readable line each."""
    reasons = [f"touches `{glob}` (design-reviewed path)" for glob in _matched_globs(settings.paths, changed)]
    wanted = {label.casefold() for label in settings.labels}
    reasons += [f"has the label `{label}`" for label in labels if label.casefold() in wanted]
    total = sum(f.lines_changed for f in changed)
    if settings.max_lines_changed is not None and total > settings.max_lines_changed:
        reasons.append(f"changes {total:,} lines (more than {settings.max_lines_changed:,})")
    if settings.new_dependencies:
        reasons += [f"adds dependency `{dep}`" for dep in new_dependencies]
    if settings.public_api and api_changes:
        reasons += [change.description for change in api_changes[:MAX_API_REASONS]]
        if len(api_changes) > MAX_API_REASONS:
            reasons.append(f"…and {len(api_changes) - MAX_API_REASONS} more breaking public API changes")
    return reasons


def _matched_globs(globs: list[str], changed: list[ChangedFile]) -> list[str]:
    paths = [p for f in changed for p in (f.path, f.old_path) if p]
    return [g for g in globs if any(fnmatch.fnmatchcase(p, g) for p in paths)]


# --- The checklist ---------------------------------------------------------------------------------


def tick_checklist(checklist: list[str], pr_body: str, link_pattern: str) -> tuple[list[RfcItem], str | None]:
    """Items ticked by ``- [x] ...`` boxes in the description, and the RFC link found in it.

    A box ticks the item whose leading words it repeats, case and punctuation aside: ``- [x]
    Motivation`` ticks "Motivation: why this change is needed". The item that asks for a link
    is done when the description contains a match of ``link_pattern``, box or no box.

    Raises:
        ValueError: ``link_pattern`` is not a valid regular expression.
    """
    try:
        found = re.search(link_pattern, pr_body or "")
    except re.error as exc:
        raise ValueError(f"rfc.link_pattern is not a valid regular expression: {exc}") from None
    link = found.group(0) if found else None
    ticked = [_words(text) for done, text in _checkboxes(pr_body) if done]
    items = []
    for text in checklist:
        # The link item is done by the link itself: a ticked box with no link proves nothing.
        done = link is not None if _is_link_item(text) else any(_same_item(text, box) for box in ticked)
        items.append(RfcItem(text=text, done=done))
    return items, link


def _checkboxes(body: str) -> list[tuple[bool, str]]:
    boxes = []
    for line in (body or "").splitlines():
        match = _CHECKBOX.match(line)
        if match:
            boxes.append((match.group(1) in "xX", match.group(2)))
    return boxes


def _words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def _is_link_item(text: str) -> bool:
    words = _words(text)
    return "link" in words or "url" in words


def _same_item(item: str, box: list[str]) -> bool:
    """The box repeats the item's leading words: its whole title (the part before a colon), at
    least two of its first words, or is itself a shorter prefix of it (``Impact``)."""
    title = _words(item.split(":", 1)[0]) or _words(item)
    if not title or not box:
        return False
    common = 0
    for a, b in zip(title, box, strict=False):
        if a != b:
            break
        common += 1
    return common == len(title) or common >= 2 or (common >= 1 and common == len(box))


# --- Dependencies ----------------------------------------------------------------------------------

_REQ_NAME = re.compile(r"^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")
_EGG = re.compile(r"[#&]egg=([A-Za-z0-9][A-Za-z0-9._-]*)")


def is_dependency_file(path: str) -> bool:
    """pyproject.toml, setup.cfg and pip requirements files (``requirements*.txt``,
    ``requirements/*.txt`` or ``.in``)."""
    p = PurePosixPath(path)
    if p.name in ("pyproject.toml", "setup.cfg"):
        return True
    if fnmatch.fnmatch(p.name, "requirements*.txt") or fnmatch.fnmatch(p.name, "requirements*.in"):
        return True
    return p.parent.name == "requirements" and p.suffix in (".txt", ".in")


def new_dependencies_between(old: str | None, new: str | None, filename: str) -> list[str]:
    """Requirements declared in ``new`` whose package ``old`` did not declare in the same place.

    ``filename`` picks the format (pyproject.toml, setup.cfg, requirements). A package moving from
    an optional extra into the main dependencies is new there. Results read like
    ``requests>=2.31`` or ``pytest>=8 (optional: test)``.

    Raises:
        ValueError: a text is not valid for its format (for example broken TOML).
    """
    if new is None:
        return []
    before = {(scope, _normalise(req)) for scope, req in _declared(old or "", filename)}
    added = []
    for scope, req in _declared(new, filename):
        if (scope, _normalise(req)) not in before:
            added.append(req if scope == "" else f"{req} ({scope})")
    return list(dict.fromkeys(added))


def _normalise(requirement: str) -> str:
    """PEP 503 name: case, ``-``, ``_`` and ``.`` do not distinguish packages."""
    egg = _EGG.search(requirement)
    match = _REQ_NAME.match(requirement.strip())
    name = egg.group(1) if egg else match.group(1) if match else requirement
    return canonicalize_name(name)


def _declared(text: str, filename: str) -> list[tuple[str, str]]:
    """(scope, requirement) pairs; scope is "" for runtime dependencies."""
    name = PurePosixPath(filename).name
    if name == "pyproject.toml":
        return _pyproject_requirements(text, filename)
    if name == "setup.cfg":
        return _setup_cfg_requirements(text, filename)
    return [("", req) for req in _requirements_txt(text)]


def _pyproject_requirements(text: str, filename: str) -> list[tuple[str, str]]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{filename}: not valid TOML: {exc}") from None
    project = _table(data.get("project"))
    found = [("", r) for r in _strings(project.get("dependencies"))]
    for extra, reqs in _table(project.get("optional-dependencies")).items():
        found += [(f"optional: {extra}", r) for r in _strings(reqs)]
    for group, reqs in _table(data.get("dependency-groups")).items():
        found += [(f"group: {group}", r) for r in _strings(reqs)]  # include-group tables are skipped
    poetry = _table(_table(data.get("tool")).get("poetry"))
    found += [("", dep) for dep in _table(poetry.get("dependencies")) if dep.lower() != "python"]
    for group, spec in _table(poetry.get("group")).items():
        found += [(f"group: {group}", dep) for dep in _table(_table(spec).get("dependencies"))]
    return found


def _table(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _strings(value: Any) -> list[str]:
    return [v.strip() for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _setup_cfg_requirements(text: str, filename: str) -> list[tuple[str, str]]:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text, source=filename)
    except configparser.Error as exc:
        raise ValueError(f"{filename}: not a valid setup.cfg: {exc}") from None
    found: list[tuple[str, str]] = []
    if parser.has_option("options", "install_requires"):
        found += [("", r) for r in _cfg_list(parser.get("options", "install_requires"))]
    if parser.has_section("options.extras_require"):
        for extra, value in parser.items("options.extras_require"):
            found += [(f"optional: {extra}", r) for r in _cfg_list(value)]
    return found


def _cfg_list(value: str) -> list[str]:
    items = (line.split(" #", 1)[0].strip() for line in value.replace(",\n", "\n").splitlines())
    return [item for item in items if item and not item.startswith("#")]


def _requirements_txt(text: str) -> list[str]:
    """Requirement lines of a pip requirements file; options and includes (-r, -c) are skipped,
    editable or URL installs count by their ``#egg=`` name."""
    joined = re.sub(r"\\\r?\n", " ", text)  # backslash continuations
    found = []
    for raw in joined.splitlines():
        line = re.split(r"(?:^|\s)#(?!egg=)", raw, maxsplit=1)[0].strip()
        if not line:
            continue
        egg = _EGG.search(line)
        editable = line.startswith(("-e ", "--editable"))
        if line.startswith("-") or "://" in line.split("@")[0] or line.startswith((".", "/")):
            # Options and includes name no package; a URL or path install may name one by #egg=.
            if egg and (editable or not line.startswith("-")):
                found.append(egg.group(1))
            continue
        found.append(line)
    return found


# --- Gathering the inputs from git (the one I/O edge of this module) -----------------------------


# The changed files, the breaking public API changes and the new dependencies.
RfcInputs = tuple[list[ChangedFile], list[ApiChange], list[str]]


def collect_rfc_inputs(repo: Path, base: str, head: str) -> RfcInputs:
    """The changed files, breaking public API changes and new dependencies between the merge
    base of ``base`` and ``head`` in the checkout at ``repo``.

    API objects are compared across all changed files at once, so a function moved to another
    module is reported as renamed ``a.f → b.f``. Files that do not parse are skipped (the
    docstring and pre-commit checks report them).

    Raises:
        GitError: a revision is unknown.
    """
    start = gitdiff.merge_base(repo, base, head)
    changed = gitdiff.changed_files(repo, start, head)
    python = [f for f in changed if not f.binary and _is_api_file(f)]
    deps = [
        f for f in changed if not f.binary and is_dependency_file(f.path) and f.status != FileStatus.DELETED
    ]
    old_paths = [f.old_path or f.path for f in python + deps if f.status != FileStatus.ADDED]
    new_paths = [f.path for f in python + deps if f.status != FileStatus.DELETED]
    old_texts = gitdiff.read_files(repo, start, old_paths)
    new_texts = gitdiff.read_files(repo, head, new_paths)
    old_api, old_where = _api_of(old_texts, [p for p in old_paths if p.endswith(".py")])
    new_api, new_where = _api_of(new_texts, [p for p in new_paths if p.endswith(".py")])
    changes = [_locate(c, old_api, new_api, old_where, new_where) for c in diff_api(old_api, new_api)]
    new_deps: list[str] = []
    for f in deps:
        try:
            new_deps += new_dependencies_between(
                old_texts.get(f.old_path or f.path), new_texts[f.path], f.path
            )
        except ValueError as exc:
            log.warning("rfc.dependency_file_unreadable", path=f.path, error=str(exc))
    log.info("rfc.inputs", files=len(changed), api_changes=len(changes), new_dependencies=len(new_deps))
    return changed, changes, list(dict.fromkeys(new_deps))


def _is_api_file(f: ChangedFile) -> bool:
    return any(is_public_module_path(p) for p in (f.path, f.old_path) if p)


def _api_of(texts: dict[str, str | None], paths: list[str]) -> tuple[dict[str, ApiObject], dict[str, str]]:
    api: dict[str, ApiObject] = {}
    where: dict[str, str] = {}
    for path in paths:
        text = texts.get(path)
        if text is None or not is_public_module_path(path):
            continue
        try:
            objects = public_api(text, module_name(path))
        except SyntaxError as exc:
            log.info("rfc.unparsable_module", path=path, line=exc.lineno)
            continue
        api.update(objects)
        where.update(dict.fromkeys(objects, path))
    return api, where


def _locate(
    change: ApiChange,
    old_api: dict[str, ApiObject],
    new_api: dict[str, ApiObject],
    old_where: dict[str, str],
    new_where: dict[str, str],
) -> ApiChange:
    """Point the change at the head-side file and line where there is one, else the base side."""
    target = change.new_qualname or change.qualname
    if target in new_api:
        return change.model_copy(update={"path": new_where[target], "line": new_api[target].line})
    return change.model_copy(
        update={"path": old_where.get(change.qualname), "line": old_api[change.qualname].line}
    )
