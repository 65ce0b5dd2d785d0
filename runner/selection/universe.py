"""The tests that exist at a commit: collected node ids when given, else read from the test files."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import PurePosixPath

from bot.core.config import TestSettings
from runner.selection.import_graph import (
    LineInfo,
    ModuleInfo,
    SymbolKind,
    analyze_module,
    is_test_symbol,
    line_info,
    module_names,
    python_files,
)
from runner.selection.pytest_config import PytestLayout

# --- The test universe ------------------------------------------------------------------------------


def split_nodeid(nodeid: str) -> tuple[str, list[str], str]:
    """``file::Class::test[param]`` → (file, [Class, test], "[param]"); a param may contain ``::``."""
    path, sep, rest = nodeid.partition("::")
    if not sep:
        return path, [], ""
    names, bracket, param = rest.partition("[")
    return path, names.split("::"), f"{bracket}{param}"


class Universe:
    """The tests that exist at head: collected node ids when given, else the static test symbols."""

    def __init__(
        self,
        all_tests: list[str] | None,
        test_files: set[str],
        head_files: Iterable[str],
        reader: Callable[[list[str]], dict[str, str | None]],
        earlier: Universe | None = None,
    ) -> None:
        self.all_tests = all_tests
        self.earlier = earlier
        self._all = set(all_tests or [])
        self._head_files = set(head_files)
        self.test_files = set(test_files)
        if all_tests is not None:
            self.test_files |= {split_nodeid(n)[0] for n in all_tests}
        self._read = reader
        self._defs: dict[str, tuple[ModuleInfo, LineInfo]] = {}
        self._names: dict[str, list[str]] | None = None
        self._paths: dict[str, str] = {}
        self._by_file: dict[str, list[str]] = {}
        for nodeid in all_tests or []:
            self._by_file.setdefault(split_nodeid(nodeid)[0], []).append(nodeid)

    def exists(self, nodeid: str) -> bool:
        """Whether a node id (from the coverage map of an older commit, say) still names a test.

        Without collected ids the answer comes from the test file's source: a missing file, or a
        test function or class no longer defined there, is gone; so is a method neither the class
        nor its base classes in the repository define. A method another package's base class may
        provide, a name bound by an import or a star import, is given the benefit of the doubt.
        """
        if nodeid in self._all:
            return True
        path, names, param = split_nodeid(nodeid)
        if self.all_tests is not None:
            return not param and bool(self.expand(path, names))
        if path not in self.test_files:
            return path in self._head_files  # a doctest item names the source module's objects
        return not names or self._defined(path, names)

    def _module(self, path: str) -> tuple[ModuleInfo, LineInfo]:
        if path not in self._defs:
            text = self._read([path])[path]
            name = self._module_names().get(path, [PurePosixPath(path).stem])[0]
            self._defs[path] = (analyze_module(path, name, text or "", is_test=True), line_info(text or ""))
        return self._defs[path]

    def _module_names(self) -> dict[str, list[str]]:
        if self._names is None:
            self._names = module_names(python_files(self._head_files))
            self._paths = {n: p for p, names in self._names.items() for n in names}
        return self._names

    def _defined(self, path: str, names: list[str]) -> bool:
        module, info = self._module(path)
        if module.error or module.star_imports or "__getattr__" in module.symbols:
            return True
        top = module.symbols.get(names[0])
        if top is None:
            return False
        if len(names) == 1 or top.kind != SymbolKind.CLASS:
            return True
        qualified = {q for q, _, _ in [*info.functions, *info.classes]}
        for depth in range(1, len(names)):
            if ".".join(names[: depth + 1]) not in qualified:
                # Not in the class body: inherited from a base class, or gone.
                return self._inherited(path, ".".join(names[:depth]), names[depth], frozenset())
        return True

    def _inherited(self, path: str, owner: str, name: str, seen: frozenset[tuple[str, str]]) -> bool:
        """Whether class ``owner`` of ``path`` may inherit ``name`` from one of its base classes.

        A base class of this repository is read (a mixin in the same file or in ``tests/__init__.py``):
        it must define the name, itself or through its own bases. A base class that is not, another
        package's, is given the benefit of the doubt, unless the class's own body defined the name
        at the earlier commit: then it was renamed or removed since.
        """
        module, _ = self._module(path)
        sym = module.symbols.get(owner)
        if sym is None:
            return True  # a nested class: its bases are not recorded, so it may inherit
        for base in sym.bases:
            if base in _PLAIN_BASES or _from_stdlib(module, base):
                continue  # unittest.TestCase, typing.Protocol, abc.ABC: no test methods to inherit
            where = self._resolve(module, base)
            if where is None:
                if self.earlier is None or not self.earlier.in_body(path, owner, name):
                    return True
                continue
            if where in seen:
                return True
            if self._defines(*where, name, seen | {where}):
                return True
        return False

    def _defines(self, path: str, owner: str, name: str, seen: frozenset[tuple[str, str]]) -> bool:
        module, _ = self._module(path)
        sym = module.symbols.get(owner)
        if module.error or module.star_imports or sym is None or sym.kind != SymbolKind.CLASS:
            return True  # not a class this reading can follow
        return self.in_body(path, owner, name) or self._inherited(path, owner, name, seen)

    def in_body(self, path: str, owner: str, name: str) -> bool:
        """Whether class ``owner`` of ``path`` defines method ``name`` itself."""
        return f"{owner}.{name}" in {q for q, _, _ in self._module(path)[1].functions}

    def _resolve(self, module: ModuleInfo, base: str) -> tuple[str, str] | None:
        """The file and class a base class written as ``base`` names, when this repository has it."""
        here = module.symbols.get(base)
        if here is not None and here.kind == SymbolKind.CLASS:
            return module.path, base
        first, _, rest = base.partition(".")
        self._module_names()
        for target in module.imports.get(first, []):
            dotted = f"{target}.{rest}" if rest else target
            owner_module, _, owner = dotted.rpartition(".")
            if owner_module in self._paths:
                return self._paths[owner_module], owner
        return None

    def expand(self, path: str, names: list[str] | None = None) -> list[str]:
        """Node ids under ``path::names`` (all parametrized cases, all methods of a class)."""
        if self.all_tests is not None:
            prefix = "::".join([path, *(names or [])])
            return [
                n
                for n in self._by_file.get(path, [])
                if n == prefix or n.startswith((f"{prefix}::", f"{prefix}["))
            ]
        if names:
            return ["::".join([path, *names])]
        return self._static_tests(path)

    def _static_tests(self, path: str) -> list[str]:
        text = self._read([path])[path]
        if text is None:
            return []
        module = analyze_module(path, PurePosixPath(path).stem, text, is_test=True)
        ids = [f"{path}::{s.name}" for s in module.symbols.values() if is_test_symbol(s, module)]
        return ids or [path]


_PLAIN_BASES = {"object", "TestCase", "unittest.TestCase", "IsolatedAsyncioTestCase"}


def _from_stdlib(module: ModuleInfo, base: str) -> bool:
    first = base.partition(".")[0]
    targets = module.imports.get(first, [])
    return bool(targets) and all(t.partition(".")[0] in sys.stdlib_module_names for t in targets)


def parse_collect_only(output: str) -> list[str]:
    """Node ids from ``pytest --collect-only -q`` output, in collection order.

    Summary lines, warnings and errors are skipped; a parametrized id may contain spaces and
    ``::`` inside its brackets.
    """
    ids: list[str] = []
    for raw in output.splitlines():
        if not raw or raw[0].isspace() or raw.startswith(("=", "_", "-")):
            continue
        line = raw.rstrip()
        path, sep, rest = line.partition("::")
        if not sep or not rest or any(c.isspace() for c in path):
            continue
        ids.append(line)
    return list(dict.fromkeys(ids))


def discover_test_files(
    files: Iterable[str], settings: TestSettings, layout: PytestLayout | None = None
) -> set[str]:
    """The test modules pytest collects among ``files``: under ``tests.paths`` when the config names
    roots (pytest is then given them), else where the project's own pytest settings look."""
    layout = layout or PytestLayout()
    candidates = python_files(files)
    if not settings.paths:
        return {p for p in candidates if layout.collects(p)}
    patterns = layout.model_copy(update={"testpaths": [], "norecursedirs": []})
    roots = [r.strip("/") for r in settings.paths]
    found = {
        p
        for p in candidates
        if patterns.collects(p) and any(r in ("", ".") or p == r or p.startswith(f"{r}/") for r in roots)
    }
    return found or {p for p in candidates if patterns.collects(p)}
