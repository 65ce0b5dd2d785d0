"""Fitting text inside GitHub's size limits: cut the least important parts first, and say so.

A text is assembled from :class:`Part` objects, each able to render all or only its first k
entries. :class:`Cutter` drops whole low-priority parts first, then shortens what is left, and
writes a note naming what was left out and where the rest is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from bot.core import limits

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Part:
    """One cuttable section: ``render(k)`` shows its first k entries, ``render(None)`` all it would."""

    label: str  # how the cut note names it
    priority: int  # lower is cut first
    render: Callable[[int | None], str]
    entries: int = 0  # entries render(None) shows; more than one means it can be shortened
    total: int = 0  # entries the section has in all, for the cut note
    droppable: bool = True


class Cutter:
    """Fits parts inside a limit: drop whole low-priority parts first, then shorten what is left.

    ``assemble(rendered_parts, cut_note)`` builds the full text; the cut note names what was left
    out and ``where`` the rest is. Kept parts are always the highest-priority ones, so a reader
    never finds the test selection while the pre-commit failure went missing.
    """

    def __init__(
        self, parts: Sequence[Part], limit: int, assemble: Callable[[list[str], str], str], where: str
    ):
        self.parts = parts
        self.limit = limit
        self.assemble = assemble
        self.where = where
        self.shown: list[int | None] = [None] * len(parts)
        self.dropped = [False] * len(parts)
        self.order = sorted(range(len(parts)), key=lambda i: (parts[i].priority, i))

    def text(self) -> str:
        rendered = [
            "" if self.dropped[i] else part.render(self.shown[i]) for i, part in enumerate(self.parts)
        ]
        return self.assemble(rendered, self.note())

    def fits(self) -> bool:
        return limits.fits(self.text(), self.limit)

    def fit(self) -> str:
        if self.fits():
            return self.text()
        if not (self._drop() or self._shorten()):
            text = self.text()
            # Only when one entry alone is larger than the limit, which the per-entry caps prevent.
            log.warning("report cut by plain truncation", limit=self.limit, length=limits.github_len(text))
            return limits.truncate(text, self.limit, where=self.where)
        log.info("report cut to fit", note=self.note())
        return self.text()

    def _drop(self) -> bool:
        for i in self.order:
            if self.parts[i].droppable:
                self.dropped[i] = True
                if self.fits():
                    return True
        return False

    def _shorten(self) -> bool:
        for i in self.order:
            if self.dropped[i] or self.parts[i].entries <= 1:
                continue
            low, high = 1, self.parts[i].entries - 1  # the largest count that fits, by bisection
            self.shown[i] = low
            if not self.fits():
                continue  # even one entry is too many while the rest stays; shorten the next part
            while low < high:
                mid = (low + high + 1) // 2
                self.shown[i] = mid
                if self.fits():
                    low = mid
                else:
                    high = mid - 1
            self.shown[i] = low
            return True
        return False

    def note(self) -> str:
        left_out = [p.label for p, d in zip(self.parts, self.dropped, strict=True) if d]
        shortened = [
            f"{p.label} (first {k:,} of {max(p.total, p.entries):,})"
            for p, k, d in zip(self.parts, self.shown, self.dropped, strict=True)
            if k is not None and not d
        ]
        bits = []
        if left_out:
            bits.append("left out " + ", ".join(left_out))
        if shortened:
            bits.append("shortened " + ", ".join(shortened))
        if not bits:
            return ""
        return f"✂️ Cut to fit GitHub's size limit: {'; '.join(bits)}. The rest is in {self.where}."


def fit(parts: Sequence[Part], limit: int, assemble: Callable[[list[str], str], str], where: str) -> str:
    return Cutter(parts, limit, assemble, where).fit()


def text_part(label: str, priority: int, text: str) -> Part:
    return Part(label=label, priority=priority, render=lambda _k: text)


def fit_blocks(blocks: list[str], label: str, where: str, *, limit: int, sep: str = "\n\n") -> str:
    """Join blocks into a check run's text, keeping whole blocks from the front while they fit."""
    part = Part(
        label=label,
        priority=0,
        render=lambda k: sep.join(blocks if k is None else blocks[:k]),
        entries=len(blocks),
        droppable=False,
    )

    def assemble(rendered: list[str], note: str) -> str:
        return "\n\n".join(x for x in [*rendered, note] if x)

    return fit([part], limit, assemble, where)
