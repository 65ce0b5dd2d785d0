"""What every signal of one selection shares: the change, the map, the universe, the hits."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from bot.core.config import TestSettings
from runner.selection.change import ChangeSet, FileChange, SourceReader
from runner.selection.coverage_map import CoverageMap
from runner.selection.cython_imports import analyze_cython, cython_files
from runner.selection.hits import Hits, Signal
from runner.selection.import_graph import (
    ImportGraph,
    LineInfo,
    build_graph,
    line_info,
    module_names,
    python_files,
)
from runner.selection.importers import runs_on_import
from runner.selection.neutral import unchanged_imports
from runner.selection.pytest_config import PytestLayout
from runner.selection.universe import Universe

# --- The decision -----------------------------------------------------------------------------------


@dataclass
class Context:
    change: ChangeSet
    settings: TestSettings
    cmap: CoverageMap | None
    read: SourceReader
    universe: Universe
    hits: Hits
    removed: set[str] = field(default_factory=set)  # selected, but not a test at head
    layout: PytestLayout = field(default_factory=PytestLayout)  # how pytest collects at head
    _unchanged_imports: dict[str, set[str]] = field(default_factory=dict)
    _graphs: dict[str, ImportGraph] = field(default_factory=dict)
    _runs: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    _names: dict[str, str] = field(default_factory=dict)
    _line_info: dict[str, LineInfo] = field(default_factory=dict)

    def graph(self, side: str) -> ImportGraph:
        """The import graph of base or head, built on first use (it reads every Python file, and
        the imports of every Cython one)."""
        if side not in self._graphs:
            rev = self.change.head if side == "head" else self.change.base
            tracked = self.change.head_files if side == "head" else self.change.base_files
            files = python_files(tracked)
            texts = self.read(rev, files)
            sources = {p: t for p, t in texts.items() if t is not None}
            compiled = {p: t for p, t in self.read(rev, cython_files(tracked)).items() if t is not None}
            extensions = analyze_cython(compiled, files) if compiled else []
            self._graphs[side] = build_graph(sources, test_files=self.universe.test_files, extra=extensions)
        return self._graphs[side]

    def runs_on_import(self, side: str) -> dict[str, set[str]]:
        """Path → the files its import runs, at base or head (:func:`importers.runs_on_import`)."""
        if side not in self._runs:
            graph = self.graph(side)
            rev = self.change.head if side == "head" else self.change.base
            sources = self.read(rev, sorted(graph.modules))
            self._runs[side] = runs_on_import(graph.modules.values(), sources, graph.by_name)
        return self._runs[side]

    def base_line_info(self, path: str) -> LineInfo:
        if path not in self._line_info:
            text = self.read(self.change.base, [path]).get(path)
            self._line_info[path] = line_info(text or "")
        return self._line_info[path]

    def module_name(self, path: str) -> str:
        if not self._names:
            every = module_names(python_files([*self.change.head_files, *self.change.base_files]))
            self._names = {p: names[0] for p, names in every.items() if names}
        return self._names.get(path, PurePosixPath(path).stem)

    def add_tests(self, nodeids: Iterable[str], rank: Signal, reason: str, weight: int = 1) -> None:
        for nodeid in nodeids:
            if self.universe.exists(nodeid):
                self.hits.add(nodeid, rank, reason, weight)
            elif rank in self.hits.enabled:
                self.removed.add(nodeid)

    def unchanged_imports(self, fc: FileChange) -> set[str]:
        """Names the change's import lines bind as before (see :func:`neutral.unchanged_imports`)."""
        if fc.path not in self._unchanged_imports:
            both = fc.base_text is not None and fc.head_text is not None
            self._unchanged_imports[fc.path] = (
                unchanged_imports(fc.base_text or "", fc.head_text or "") if both else set()
            )
        return self._unchanged_imports[fc.path]

    def tests_running(self, path: str, first: int, last: int) -> set[str]:
        """Tests that ran lines ``first``–``last`` of ``path``, or whose module's import did."""
        assert self.cmap is not None
        tests = self.cmap.tests_between(path, first, last)
        for module in self.cmap.importers_between(path, first, last):
            tests.update(self.universe.expand(module))
        return tests
