"""The docstring check: the public API a pull request adds or changes must be documented.

Only what the PR touches is checked — a public function, method, property or class whose lines
the diff changes, and whose code really differs from the base (a pure reformat is not a change).
An undocumented function the PR does not touch is never reported.

The core, :func:`check_module`, is a pure function on the file's old and new text and the changed
line numbers; :func:`check_docstrings` feeds it from git. Docstrings are read with the
``docstring-parser`` library in the repository's style (google, numpy or reST): with ``auto``, the
convention the project declares (:mod:`runner.checks.doc_convention`), else a vote over the
docstrings present. Sections in a markup no style reads are never reported as missing, and an
override without a docstring inherits its base method's (:mod:`runner.checks.inherited_docs`).

Why past 400 lines: the checks of each docstring section (parameters, returns, raises) are one
visitor over one parsed docstring, and reading it from git (the style, the modules bases live
in) feeds that visitor only.
"""

from __future__ import annotations

import ast
import fnmatch
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath

import docstring_parser
import structlog
from docstring_parser import Docstring, DocstringStyle, ParseError

from bot.core.config import DocstringSettings
from bot.core.models import CheckStatus, DocstringResult, Finding, Level
from runner import gitdiff
from runner.checks.api_surface import (
    ApiObject,
    ObjectKind,
    ParamKind,
    is_public_module_path,
    module_name,
    public_api,
)
from runner.checks.doc_convention import CONVENTION_FILES, declared_convention, has_sections
from runner.checks.inherited_docs import ModuleReader, inherited_docstring
from runner.git import GitError
from runner.gitdiff import ChangedFile, FileStatus

log = structlog.get_logger(__name__)

STYLES: dict[str, DocstringStyle] = {
    "google": DocstringStyle.GOOGLE,
    "numpy": DocstringStyle.NUMPYDOC,
    "rest": DocstringStyle.REST,
}
DEFAULT_STYLE = "google"
# Fewer votes than this in the changed files is too thin a sample; the repository's files join in.
MIN_STYLE_VOTES = 5
# Enough to see a repository's habit without reading all of a large one.
MAX_STYLE_FILES = 300

# docstring-parser tags each parameter entry with its section; attributes are not parameters.
_PARAM_SECTIONS = {"param", "parameter", "arg", "argument", "other_param", "key", "keyword"}
_KEYWORD_SECTIONS = {"key", "keyword"}
_NO_VALUE_ANNOTATIONS = {"None", "NoReturn", "Never", "typing.NoReturn", "typing.Never"}
# Raised to mark an abstract or unfinished method, not an error callers handle.
_UNDOCUMENTED_RAISES = {"NotImplementedError", "NotImplemented"}
_OVERRIDE_DECORATORS = {"override", "overrides"}
# Dunder methods checked like ordinary methods; the rest are protocol with obvious meaning, and
# ``__init__`` is checked through its class.
_CHECKED_DUNDERS = {"__call__"}


# --- Style -----------------------------------------------------------------------------------------


def docstring_style(docstring: str) -> str | None:
    """The style a docstring is written in, or ``None`` when it has no sections to tell by."""
    counts = {name: len(_parse_as(docstring, style).meta) for name, style in STYLES.items()}
    best = max(counts, key=lambda name: counts[name])  # ties keep the STYLES order
    return best if counts[best] else None


def vote_styles(sources: Iterable[str]) -> Counter[str]:
    """One vote per sectioned docstring in the given module sources; unparsable sources abstain."""
    votes: Counter[str] = Counter()
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                style = docstring_style(doc) if doc else None
                if style:
                    votes[style] += 1
    return votes


def choose_style(votes: Counter[str]) -> str:
    """The winning style; google when nothing voted, earlier in ``STYLES`` on a tie."""
    if not votes:
        return DEFAULT_STYLE
    return max(STYLES, key=lambda name: votes.get(name, 0))


def _parse_as(docstring: str, style: DocstringStyle) -> Docstring:
    try:
        return docstring_parser.parse(docstring, style)
    except ParseError:
        return Docstring(style=style)


def _parse(docstring: str, style: str) -> Docstring:
    """Parse in the repository's style; a docstring visibly written in another style is read in
    that one, rather than reporting every parameter of it as undocumented."""
    parsed = _parse_as(docstring, STYLES[style])
    if parsed.meta:
        return parsed
    other = docstring_style(docstring)
    return _parse_as(docstring, STYLES[other]) if other else parsed


# --- What the change touches -----------------------------------------------------------------------


def _touched(
    path: str, old_source: str | None, new_source: str, lines: set[int]
) -> tuple[dict[str, ApiObject], list[ApiObject]]:
    """The head-side public API of the file, and the objects of it the change adds or whose code it
    changes.

    An object counts when a changed line is its own (a class's methods own their lines) and its
    code differs from the base version, ignoring formatting and comments. A class also counts
    when its ``__init__`` does, since the class docstring documents the constructor.
    """
    if not is_public_module_path(path):
        return {}, []
    module = module_name(path)
    new_api = public_api(new_source, module)
    old_api = _api_or_empty(old_source, module)
    touched = {
        q
        for q, obj in new_api.items()
        if obj.touched_by(lines) and (q not in old_api or old_api[q].fingerprint != obj.fingerprint)
    }
    touched |= {obj.parent for q in touched if (obj := new_api[q]).name == "__init__" and obj.parent}
    return new_api, [obj for q, obj in new_api.items() if q in touched]


def _api_or_empty(source: str | None, module: str) -> dict[str, ApiObject]:
    if source is None:
        return {}
    try:
        return public_api(source, module)
    except SyntaxError:  # a base that did not parse: everything at head is new
        return {}


# --- The checks ------------------------------------------------------------------------------------


def check_module(
    path: str,
    old_source: str | None,
    new_source: str,
    changed_lines: set[int],
    style: str,
    *,
    require_returns: bool = True,
    require_raises: bool = False,
    read_module: ModuleReader | None = None,
) -> list[Finding]:
    """Findings for the public objects of one file that the change adds or modifies.

    ``style`` is one of google, numpy, rest. A file that does not parse gives one finding at the
    syntax error's line. ``read_module`` (dotted name → source) lets an override without a
    docstring inherit its base method's from another module of the repository.
    """
    findings, _ = _check_module(
        path, old_source, new_source, changed_lines, style, require_returns, require_raises, read_module
    )
    return findings


def _check_module(
    path: str,
    old_source: str | None,
    new_source: str,
    lines: set[int],
    style: str,
    require_returns: bool,
    require_raises: bool,
    read_module: ModuleReader | None = None,
) -> tuple[list[Finding], int]:
    try:
        api, objects = _touched(path, old_source, new_source, lines)
    except SyntaxError as exc:
        line = max(exc.lineno or 1, 1)
        return [_finding(path, line, "Syntax error", f"`{path}` does not parse: {exc.msg}")], 0
    module, package = module_name(path), PurePosixPath(path).name == "__init__.py"

    def inherited(obj: ApiObject) -> str | None:
        if obj.parent is None:
            return None
        class_path = obj.parent.removeprefix(module + ".")
        reader = read_module or (lambda _name: None)
        return inherited_docstring(new_source, module, class_path, obj.name, reader, package=package)

    checker = _Checker(path, api, style, require_returns, require_raises, inherited)
    checked = [obj for obj in objects if checker.in_scope(obj)]
    return [f for obj in checked for f in checker.check(obj)], len(checked)


def _finding(path: str, line: int, title: str, message: str) -> Finding:
    return Finding(path=path, line=line, level=Level.WARNING, title=title, message=message)


class _Checker:
    """The rules for one file's objects."""

    def __init__(
        self,
        path: str,
        api: dict[str, ApiObject],
        style: str,
        require_returns: bool,
        require_raises: bool,
        inherited: Callable[[ApiObject], str | None],
    ):
        self.inherited = inherited
        self.path = path
        self.api = api
        self.style = style
        self.require_returns = require_returns
        self.require_raises = require_raises

    def in_scope(self, obj: ApiObject) -> bool:
        if any(d.rsplit(".", 1)[-1] in _OVERRIDE_DECORATORS for d in obj.decorators):
            return False  # documented where it is declared
        name = obj.name
        return not (name.startswith("__") and name.endswith("__") and name not in _CHECKED_DUNDERS)

    def check(self, obj: ApiObject) -> list[Finding]:
        if obj.kind == ObjectKind.CLASS:
            return self._check_class(obj)
        if obj.docstring is None:
            # An override documented by the method it overrides, as inspect.getdoc reads it.
            return [] if obj.parent and self.inherited(obj) else [self._missing(obj)]
        if obj.kind == ObjectKind.PROPERTY:
            return []  # a property's docstring describes the attribute; no sections are due
        doc = _parse(obj.docstring, self.style)
        if _unreadable(doc, obj.docstring):
            return []  # sections in a markup no style reads: never reported as missing
        findings = self._check_params(obj, obj, _documented(doc))
        findings += self._check_returns(obj, doc)
        findings += self._check_raises(obj, doc)
        return findings

    def _missing(self, obj: ApiObject) -> Finding:
        return _finding(self.path, obj.line, "Missing docstring", f"`{obj.display}` has no docstring")

    def _check_class(self, cls: ApiObject) -> list[Finding]:
        findings = [] if cls.docstring else [self._missing(cls)]
        init = self.api.get(f"{cls.qualname}.__init__")
        docs = [d for d in (cls.docstring, init.docstring if init else None) if d]
        if init is None or not docs:
            return findings  # no constructor of its own here, or nothing written to compare
        # numpy documents constructor parameters in the class docstring, google in either.
        documented: dict[str, str] = {}
        for text in docs:
            parsed = _parse(text, self.style)
            if _unreadable(parsed, text):
                return findings
            documented.update(_documented(parsed))
        return findings + self._check_params(cls, init, documented)

    def _check_params(self, owner: ApiObject, fn: ApiObject, documented: dict[str, str]) -> list[Finding]:
        names = {p.name for p in fn.params}
        stars: dict[ParamKind, str] = {
            p.kind: p.name for p in fn.params if p.kind in (ParamKind.VAR_POSITIONAL, ParamKind.VAR_KEYWORD)
        }
        # *args / **kwargs documented under any name count for the function's own.
        documented_names = {
            _star_target(n, stars) if n.startswith("*") else n: section for n, section in documented.items()
        }
        findings = []
        missing = [p.name for p in fn.params if p.kind not in stars and p.name not in documented_names]
        if missing:
            where = " (in the class or `__init__` docstring)" if owner is not fn else ""
            noun = "parameter" if len(missing) == 1 else "parameters"
            listed = ", ".join(f"`{n}`" for n in missing)
            findings.append(
                _finding(
                    self.path,
                    owner.line,
                    "Undocumented parameter",
                    f"`{owner.display}` does not document {noun} {listed}{where}",
                )
            )
        for name, section in documented_names.items():
            if name in names:
                continue
            if ParamKind.VAR_KEYWORD in stars and (section in _KEYWORD_SECTIONS or not name.startswith("*")):
                continue  # keys passed through **kwargs
            findings.append(
                _finding(
                    self.path,
                    owner.line,
                    "Unknown parameter in docstring",
                    f"`{owner.display}` documents `{name}` but has no such parameter",
                )
            )
        return findings

    def _check_returns(self, fn: ApiObject, doc: Docstring) -> list[Finding]:
        if not self.require_returns:
            return []
        summary = (doc.short_description or "").lstrip().lower()
        if fn.is_generator:
            has_yields = any(r.is_generator for r in doc.many_returns)
            if has_yields or summary.startswith("yield"):
                return []
            message = f"`{fn.display}` is a generator but its docstring has no Yields section"
            return [_finding(self.path, fn.line, "Missing Yields", message)]
        if not fn.returns_value or (fn.returns_annotation or "") in _NO_VALUE_ANNOTATIONS:
            return []
        # Google style lets a short docstring say "Returns ..." in its summary instead.
        if any(not r.is_generator for r in doc.many_returns) or summary.startswith("return"):
            return []
        message = f"`{fn.display}` returns a value but its docstring has no Returns section"
        return [_finding(self.path, fn.line, "Missing Returns", message)]

    def _check_raises(self, fn: ApiObject, doc: Docstring) -> list[Finding]:
        if not self.require_raises:
            return []
        documented = {(r.type_name or "").strip().rsplit(".", 1)[-1] for r in doc.raises}
        missing = [
            name for name in fn.raises if name.rsplit(".", 1)[-1] not in documented | _UNDOCUMENTED_RAISES
        ]
        if not missing:
            return []
        listed = ", ".join(f"`{n}`" for n in missing)
        message = f"`{fn.display}` raises {listed} but its docstring does not document it"
        return [_finding(self.path, fn.line, "Missing Raises", message)]


def _unreadable(doc: Docstring, text: str) -> bool:
    """Sections are there (``**Parameters:**``, Markdown headings) but no style parsed any."""
    return not doc.meta and has_sections(text)


def _documented(doc: Docstring) -> dict[str, str]:
    """Documented parameter name → the section it is in; ``x, y : int`` (numpy) names two."""
    names: dict[str, str] = {}
    for param in doc.params:
        section = param.args[0] if param.args else "param"
        if section not in _PARAM_SECTIONS:
            continue
        for raw in param.arg_name.split(","):
            name = raw.strip().replace("\\*", "*")
            if name:
                names[name] = section
    return names


def _star_target(name: str, stars: dict[ParamKind, str]) -> str:
    kind = ParamKind.VAR_KEYWORD if name.startswith("**") else ParamKind.VAR_POSITIONAL
    return stars.get(kind, name)


# --- From git ---------------------------------------------------------------------------------------


def check_docstrings(repo: Path, base: str, head: str, settings: DocstringSettings) -> DocstringResult:
    """Check the public API changed between the merge base of ``base`` and ``head``, and ``head``.

    A git failure (unknown revision) gives an ERROR result with git's message, never a crash.
    """
    try:
        start = gitdiff.merge_base(repo, base, head)
        files = [f for f in gitdiff.changed_files(repo, start, head) if _in_scope(f, settings.exclude)]
        lines = gitdiff.changed_lines(repo, start, head, include_deletions=True)
        new_texts = gitdiff.read_files(repo, head, [f.path for f in files])
        old_texts = gitdiff.read_files(repo, start, [f.old_path or f.path for f in files])
        style: str = settings.style
        label = f"{style} style"
        if style == "auto":
            style, label = _detect_style(repo, head, settings.exclude, new_texts)
    except GitError as exc:
        log.warning("docstrings.git_failed", error=str(exc))
        return DocstringResult(status=CheckStatus.ERROR, message=str(exc))
    findings: list[Finding] = []
    checked = 0
    unread: list[str] = []
    read_module = _module_reader(repo, head)
    for f in files:
        new = new_texts[f.path]
        if new is None:  # a symbolic link, a submodule or a huge file: refused, never followed
            unread.append(f.path)
            continue
        old = old_texts[f.old_path or f.path]
        found, count = _check_module(
            f.path,
            old,
            new,
            lines.get(f.path, set()),
            style,
            settings.require_returns,
            settings.require_raises,
            read_module,
        )
        findings += found
        checked += count
    status = CheckStatus.FAILED if findings else CheckStatus.PASSED
    message = _summary(checked, len(findings), label)
    if unread:
        message += f"; not read (not a regular file, or too large): {', '.join(f'`{p}`' for p in unread)}"
    log.info("docstrings.checked", files=len(files), checked=checked, findings=len(findings), style=style)
    return DocstringResult(status=status, style=style, findings=findings, checked=checked, message=message)


def _in_scope(f: ChangedFile, exclude: list[str]) -> bool:
    if f.status == FileStatus.DELETED or f.binary or not is_public_module_path(f.path):
        return False
    return not any(fnmatch.fnmatch(f.path, glob) for glob in exclude)


def _detect_style(
    repo: Path, head: str, exclude: list[str], changed: dict[str, str | None]
) -> tuple[str, str]:
    """The style, and how it was decided: the convention the project declares, else a vote."""
    declared = declared_convention(gitdiff.read_files(repo, head, list(CONVENTION_FILES)))
    if declared is not None:
        return declared[0], f"{declared[0]} style, {declared[1]}"
    votes = vote_styles(t for t in changed.values() if t)
    if sum(votes.values()) < MIN_STYLE_VOTES:
        others = [
            p
            for p in gitdiff.list_files(repo, head)
            if p.endswith(".py") and p not in changed and not any(fnmatch.fnmatch(p, g) for g in exclude)
        ][:MAX_STYLE_FILES]
        votes += vote_styles(t for t in gitdiff.read_files(repo, head, others).values() if t)
    style = choose_style(votes)
    return style, f"{style} style"


def _module_reader(repo: Path, head: str) -> ModuleReader:
    """A module's source in the commit by its dotted name (flat or src layout), read once."""
    cache: dict[str, str | None] = {}

    def read(name: str) -> str | None:
        if name not in cache:
            stem = name.replace(".", "/")
            paths = [f"{root}{stem}{end}" for root in ("", "src/") for end in (".py", "/__init__.py")]
            texts = gitdiff.read_files(repo, head, paths)
            cache[name] = next((t for t in texts.values() if t is not None), None)
        return cache[name]

    return read


def _summary(checked: int, problems: int, style: str) -> str:
    objects = "object" if checked == 1 else "objects"
    if not problems:
        return f"{checked} changed public {objects} checked ({style}): all documented"
    noun = "problem" if problems == 1 else "problems"
    return f"{checked} changed public {objects} checked ({style}): {problems} {noun}"
