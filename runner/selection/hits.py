"""The tests the signals hit, ranked by the strongest signal, with their reasons; the budget."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from bot.core.config import TestSettings
from bot.core.models import SelectedTest, Selection

MAX_LINES_SHOWN = 6
MAX_REASONS = 6


class Signal(IntEnum):
    """Strength of a reason; lower is stronger (kept first under a budget)."""

    ALWAYS = 0
    EDITED = 1
    LINE = 2
    FUNCTION = 3
    IMPORT_TIME = 4
    STATIC = 5
    NAME = 6
    BASE_BRANCH = 7  # changed on the base branch since the coverage map was recorded


# --- Collecting hits --------------------------------------------------------------------------------


@dataclass
class Hit:
    rank: Signal
    weight: int = 0
    reasons: list[tuple[Signal, str]] = field(default_factory=list)
    lines: dict[str, set[int]] = field(default_factory=dict)


class Hits:
    """Per test: the strongest signal, how much of the change it covers, and the reasons.

    While ``relabel`` is set (the change the base branch made since the coverage map), every hit
    is recorded as that, the weakest signal, with that reason: it is not the PR's change.
    """

    def __init__(self, enabled: frozenset[Signal] | None = None) -> None:
        self.by_test: dict[str, Hit] = {}
        self.enabled = enabled if enabled is not None else frozenset(Signal)
        self.relabel: str | None = None

    def add(self, nodeid: str, rank: Signal, reason: str, weight: int = 1) -> None:
        if rank not in self.enabled:
            return
        if self.relabel is not None:
            rank, reason = Signal.BASE_BRANCH, self.relabel
        hit = self.by_test.setdefault(nodeid, Hit(rank=rank))
        hit.rank = min(hit.rank, rank)
        hit.weight += weight
        if (rank, reason) not in hit.reasons:
            hit.reasons.append((rank, reason))

    def add_line(self, nodeid: str, path: str, line: int) -> None:
        if Signal.LINE not in self.enabled:
            return
        if self.relabel is not None:
            self.add(nodeid, Signal.LINE, "")
            return
        hit = self.by_test.setdefault(nodeid, Hit(rank=Signal.LINE))
        hit.rank = min(hit.rank, Signal.LINE)
        hit.weight += 1
        hit.lines.setdefault(path, set()).add(line)

    def total_weight(self) -> int:
        """Grows with every hit recorded: a signal that selected anything changed it."""
        return sum(h.weight for h in self.by_test.values())

    def ranked(self) -> list[tuple[str, Hit]]:
        return sorted(self.by_test.items(), key=lambda kv: (kv[1].rank, -kv[1].weight, kv[0]))


def _line_reason(path: str, lines: set[int]) -> str:
    shown = sorted(lines)
    text = ", ".join(str(n) for n in shown[:MAX_LINES_SHOWN])
    if len(shown) > MAX_LINES_SHOWN:
        text += f" (+{len(shown) - MAX_LINES_SHOWN} more)"
    return f"covers {path}:{text} changed in this PR"


def _reasons(hit: Hit) -> list[str]:
    tagged = [(Signal.LINE, _line_reason(p, ls)) for p, ls in sorted(hit.lines.items())]
    tagged.extend(hit.reasons)
    ordered = [text for _, text in sorted(tagged, key=lambda t: t[0])]
    if len(ordered) > MAX_REASONS:
        ordered = [*ordered[: MAX_REASONS - 1], f"and {len(ordered) - MAX_REASONS + 1} more reasons"]
    return ordered


# --- Budget -------------------------------------------------------------------------------------------


def _subsume_cases(hits: Hits) -> None:
    """``test_f`` selected as a whole (no collected ids) runs every case: fold ``test_f[...]`` into it.

    The cases a map recorded may not exist any more when the PR changed the parametrization."""
    for nodeid in [n for n in hits.by_test if "[" in n]:
        whole = nodeid.partition("[")[0]
        if whole in hits.by_test:
            case = hits.by_test.pop(nodeid)
            hit = hits.by_test[whole]
            hit.rank = min(hit.rank, case.rank)
            hit.weight += case.weight
            hit.reasons.extend(r for r in case.reasons if r not in hit.reasons)
            for path, lines in case.lines.items():
                hit.lines.setdefault(path, set()).update(lines)


def apply_budget(hits: Hits, settings: TestSettings, total: int | None) -> Selection:
    _subsume_cases(hits)
    ranked = hits.ranked()
    keep = ranked if settings.max_tests is None else ranked[: settings.max_tests]
    dropped = [] if settings.max_tests is None else [n for n, _ in ranked[settings.max_tests :]]
    tests = [SelectedTest(nodeid=n, reasons=_reasons(h)) for n, h in keep]
    return Selection(tests=tests, total_tests=total, budget_dropped=dropped)
