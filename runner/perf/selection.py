"""Which pytest benchmarks a change can affect: the tests' selection, over the benchmarks' paths.

Benchmarks often live outside the test suite (``benchmarks/``, ``bench/``), where the tests'
selection never looks. The benchmarks are selected with the tests' settings and signals, but
rooted at the paths ``performance.pytest`` gives pytest (the test roots when it gives none). The
coverage map records the test roots only, so it speaks for benchmarks inside them; benchmarks
elsewhere are chosen by the static signals, which err on the side of selecting.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from bot.core.config import RepoConfig, TestSettings
from bot.core.models import Selection
from runner.selection.pr import MapSource, nothing_selected, select_tests

OUTSIDE_THE_MAP = (
    "The benchmarks lie outside the test roots ({roots}), where coverage maps are recorded: they are "
    "chosen by the static signals."
)


def benchmark_roots(config: RepoConfig) -> list[str]:
    """The paths ``performance.pytest`` gives pytest (its options left out), else the test roots."""
    given = [
        a.split("::")[0].rstrip("/") or "." for a in config.performance.pytest or [] if not a.startswith("-")
    ]
    return given or list(config.tests.paths)


def where_looked(config: RepoConfig) -> str:
    """Where the pytest benchmarks were looked for, and how to point paritybot elsewhere."""
    given = [a for a in config.performance.pytest or [] if not a.startswith("-")]
    if given:
        where = ", ".join(given) + " (performance.pytest)"
    elif config.tests.paths:
        where = ", ".join(config.tests.paths) + " (tests.paths)"
    else:
        where = "what pytest collects with no arguments (its testpaths)"
    return (
        f"Looked for tests that take pytest-benchmark's `benchmark` fixture in {where}; to look elsewhere, "
        "set `performance.pytest` to your benchmarks' paths (for example `performance: {pytest: [benchmarks/]}`)."
    )


def map_speaks_for(roots: list[str], settings: TestSettings) -> bool:
    """Whether every benchmark root lies inside a test root, where the coverage map was recorded."""
    return all(
        any(PurePosixPath(root).is_relative_to(PurePosixPath(test_root)) for test_root in settings.paths)
        for root in roots
    )


def benchmark_settings(config: RepoConfig) -> TestSettings:
    return config.tests.model_copy(update={"paths": benchmark_roots(config)})


def select_benchmarks(
    repo: Path, base: str, head: str, config: RepoConfig, maps: MapSource | None
) -> Selection:
    """The benchmarks ``base``...``head`` can affect, each with its reasons (node ids, as tests are).

    Raises:
        GitError: a revision is unknown or git failed.
    """
    roots = benchmark_roots(config)
    inside = map_speaks_for(roots, config.tests)
    selection = select_tests(repo, base, head, benchmark_settings(config), maps if inside else None)
    if not inside and maps is not None:
        where = ", ".join(config.tests.paths) or "pytest's testpaths"
        selection.notes.append(OUTSIDE_THE_MAP.format(roots=where))
    return selection


def why_lines(selection: Selection, limit: int = 20) -> list[str]:
    """Why the selection took these benchmarks, a line per benchmark file (or why it took none),
    then its notes; for the summary, where a line per benchmark would drown the table."""
    if selection.whole_suite:
        lines = [f"every benchmark: {reason}" for reason in selection.whole_suite_reasons]
    elif not selection.tests:
        lines = [nothing_selected(selection, "benchmark")]
    else:
        by_file: dict[str, list[str]] = {}
        for test in selection.tests:
            reasons = by_file.setdefault(test.nodeid.split("::")[0], [])
            reasons += [r for r in test.reasons if r not in reasons]
        lines = [f"`{path}`: {'; '.join(reasons[:3])}" for path, reasons in by_file.items()]
    if len(lines) > limit:
        lines = [*lines[: limit - 1], f"… and {len(lines) - limit + 1} more"]
    return [*lines, *selection.notes][: limit + 5]
