"""A step's output as a terminal would show it, made safe for a page: lines of styled segments.

Colours and styles (SGR: bold, dim, italic, underline, the 16 colours, 256-colour and true-colour
picks brought to the nearest of the 16) become CSS class names from a fixed vocabulary, never a
style or attribute taken from the output. Every other escape is dropped: cursor moves and erasing
(CSI), window titles and OSC-8 hyperlinks (OSC: the link's text stays, plain, its target goes),
and other control characters. A carriage return overwrites the line as a terminal would, so a
progress bar shows its last state.

The parser keeps its state across pieces of output, so a colour set in one piece goes on in the
next and a line split across pieces is one line; it hands out complete lines only, until told the
output ended.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

Segment = tuple[str, str]  # (classes, text)

ESC = "\x1b"
# One escape sequence: CSI (ESC [ params final), OSC (ESC ] … BEL or ESC \), a two-character escape.
_ESCAPE = re.compile(
    r"\x1b(?:\[([0-?]*)[ -/]*([@-~])|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[ -/]+[0-~]|[0-Z\\-~]|$)"
    r"|\x9b[0-?]*[ -/]*[@-~]"
)
# Control characters left once the escapes are gone (a stray ESC included); tabs are spaces by then.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_BASIC = [
    (0, 0, 0),
    (205, 49, 49),
    (13, 188, 121),
    (229, 229, 16),
    (36, 114, 200),
    (188, 63, 188),
    (17, 168, 205),
    (229, 229, 229),
]
_BRIGHT = [
    (102, 102, 102),
    (241, 76, 76),
    (35, 209, 139),
    (245, 245, 67),
    (59, 142, 234),
    (214, 112, 214),
    (41, 184, 219),
    (255, 255, 255),
]
_PALETTE = _BASIC + _BRIGHT
GROUP_START = re.compile(r"^(?:::group::|##\[group\])(.*)$")
GROUP_END = re.compile(r"^(?:::endgroup::|##\[endgroup\])\s*$")
# What a reader looks for first in a failed step: pytest's E lines and FAILED, a traceback, an error.
_ERROR = re.compile(
    r"^(E {3}|FAILED\b|ERROR\b|Traceback \(most recent call last\)|fatal:|error(\[\w+\])?:)"
    r"|^[\w.]*(Error|Exception)\b:"
    r"|: error\b",
    re.IGNORECASE,
)


def _nearest(rgb: tuple[int, int, int]) -> int:
    return min(range(16), key=lambda i: sum((a - b) ** 2 for a, b in zip(rgb, _PALETTE[i], strict=True)))


def _xterm(n: int) -> int:
    """One of the 16 colours nearest to xterm's 256-colour ``n``."""
    if n < 16:
        return n
    if n < 232:
        n -= 16
        levels = [0, 95, 135, 175, 215, 255]
        return _nearest((levels[n // 36], levels[n // 6 % 6], levels[n % 6]))
    grey = 8 + (n - 232) * 10
    return _nearest((grey, grey, grey))


@dataclass
class _Style:
    bold: bool = False
    dim: bool = False
    italic: bool = False
    underline: bool = False
    fg: int | None = None
    bg: int | None = None

    def classes(self) -> str:
        names = [
            n
            for n, on in (("b", self.bold), ("d", self.dim), ("i", self.italic), ("u", self.underline))
            if on
        ]
        if self.fg is not None:
            names.append(f"fg{self.fg}")
        if self.bg is not None:
            names.append(f"bg{self.bg}")
        return " ".join(names)

    def apply(self, params: str) -> None:
        codes = [int(p) if p.isdigit() else 0 for p in params.replace(":", ";").split(";")] if params else [0]
        i = 0
        while i < len(codes):
            code = codes[i]
            if code in (38, 48):
                colour, used = _extended(codes[i + 1 :])
                if code == 38:
                    self.fg = colour
                else:
                    self.bg = colour
                i += used
            else:
                self._simple(code)
            i += 1

    def _simple(self, code: int) -> None:
        if code == 0:
            self.__init__()  # type: ignore[misc]
        elif code in (1, 2, 3, 4):
            setattr(self, ("bold", "dim", "italic", "underline")[code - 1], True)
        elif code == 22:
            self.bold = self.dim = False
        elif code == 23:
            self.italic = False
        elif code == 24:
            self.underline = False
        elif 30 <= code <= 37 or 90 <= code <= 97:
            self.fg = code - 30 if code < 90 else code - 82
        elif 40 <= code <= 47 or 100 <= code <= 107:
            self.bg = code - 40 if code < 100 else code - 92
        elif code == 39:
            self.fg = None
        elif code == 49:
            self.bg = None


def _extended(rest: list[int]) -> tuple[int | None, int]:
    """The colour of ``38;5;n`` / ``38;2;r;g;b`` (after the 38), and how many codes it used."""
    if len(rest) >= 2 and rest[0] == 5:
        return _xterm(min(rest[1], 255)), 2
    if len(rest) >= 4 and rest[0] == 2:
        return _nearest((min(rest[1], 255), min(rest[2], 255), min(rest[3], 255))), 4
    return None, len(rest)


@dataclass
class Line:
    number: int
    segments: list[Segment]
    group: str | None = None  # this line opens a collapsible group with this title
    end_group: bool = False  # this line closes the open group

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.segments)


@dataclass
class TerminalParser:
    """Turns a step's output, piece by piece, into numbered lines (see the module docstring)."""

    style: _Style = field(default_factory=_Style)
    lines_out: int = 0
    first_error: int | None = None
    _pending: str = ""
    _open_groups: int = 0

    def feed(self, text: str, *, final: bool = False) -> list[Line]:
        self._pending += text
        *complete, self._pending = self._pending.split("\n")
        if final and self._pending:
            complete.append(self._pending)
            self._pending = ""
        return [self._line(raw) for raw in complete]

    def _line(self, raw: str) -> Line:
        segments: list[Segment] = []
        pos = 0
        for match in _ESCAPE.finditer(raw):
            self._text(segments, raw[pos : match.start()])
            pos = match.end()
            if match.group(2) == "m":
                self.style.apply(match.group(1) or "")
        self._text(segments, raw[pos:])
        self.lines_out += 1
        line = Line(self.lines_out, _merge(segments))
        plain = line.text
        if (opened := GROUP_START.match(plain)) is not None:
            line.group, line.segments = opened.group(1).strip() or "group", []
            self._open_groups += 1
        elif GROUP_END.match(plain) and self._open_groups:
            line.end_group, line.segments = True, []
            self._open_groups -= 1
        elif self.first_error is None and _ERROR.search(plain):
            self.first_error = line.number
        return line

    def _text(self, segments: list[Segment], text: str) -> None:
        if "\r" in text:
            # A carriage return: what follows overwrites the line (a progress bar's last state).
            kept = [part for part in text.split("\r") if part]
            segments.clear()
            text = kept[-1] if kept else ""
        text = _CONTROL.sub("", text.replace("\t", "    "))
        if text:
            segments.append((self.style.classes(), text))


def _merge(segments: list[Segment]) -> list[Segment]:
    merged: list[Segment] = []
    for classes, text in segments:
        if merged and merged[-1][0] == classes:
            merged[-1] = (classes, merged[-1][1] + text)
        else:
            merged.append((classes, text))
    return merged


def render_lines(text: str) -> tuple[list[Line], int | None]:
    """All of ``text``'s lines, and the number of its first error line (None: none looks like one)."""
    parser = TerminalParser()
    return parser.feed(text, final=True), parser.first_error


_SGR = re.compile(r"\x1b\[([0-9;:]*)m")
# Words every line _ERROR matches has (lower case): lines without any are never looked at.
_ERROR_WORDS = ("e   ", "failed", "error", "traceback", "fatal:", "exception")


def _groups_open(text: str, end: int) -> int:
    """Groups opened and not closed before offset ``end`` (a line start) of ``text``, as the parser
    counts them: only the lines that hold a group marker are parsed."""
    depth, pos = 0, 0
    while True:
        hits = [
            i
            for marker in ("::group::", "##[group]", "::endgroup::", "##[endgroup]")
            if (i := text.find(marker, pos, end)) >= 0
        ]
        if not hits:
            return depth
        line_start = text.rfind("\n", 0, min(hits)) + 1
        line_end = text.find("\n", min(hits), end) + 1 or end
        parser = TerminalParser(_open_groups=depth)
        parser.feed(text[line_start:line_end], final=True)
        depth, pos = parser._open_groups, line_end


class LogText:
    """A whole log, for reading windows of it: lines ``first``–``last`` are parsed as if the parser
    had read everything before them (colours and open groups carried over), without parsing what
    lies between, so a 100,000-line log's head and tail cost what the lines shown cost. ``final``:
    the output ended, and its last line counts even without a newline."""

    def __init__(self, text: str, *, final: bool) -> None:
        if not final:
            text = text[: text.rfind("\n") + 1]  # an unfinished last line waits for its end
        elif text and not text.endswith("\n"):
            text += "\n"
        self.text = text
        self.count = text.count("\n")
        self._groups = "::group::" in text or "##[group]" in text

    def _offset(self, number: int) -> int:
        """Where line ``number`` (1 to count + 1) starts, found from the nearer end."""
        text, pos = self.text, 0
        if number <= self.count // 2:
            for _ in range(number - 1):
                pos = text.find("\n", pos) + 1
            return pos
        pos = len(text)
        for _ in range(self.count + 1 - number):
            pos = text.rfind("\n", 0, pos - 1) + 1
        return pos

    def lines(self, first: int, last: int) -> list[Line]:
        first, last = max(first, 1), min(last, self.count)
        if first > last:
            return []
        start = self._offset(first)
        end = start
        for _ in range(last - first + 1):
            end = self.text.find("\n", end) + 1
        return self._parse(start, end, first)

    def _parse(self, start: int, end: int, first: int) -> list[Line]:
        parser = TerminalParser(lines_out=first - 1)
        text = self.text
        # The style at ``start``: what the SGRs after the last plain reset before it left.
        reset = max(text.rfind("\x1b[0m", 0, start), text.rfind("\x1b[m", 0, start), 0)
        if text.find("\x1b[", reset, start) >= 0:
            for match in _SGR.finditer(text, reset, start):
                parser.style.apply(match.group(1))
        if self._groups:
            parser._open_groups = _groups_open(text, start)
        return parser.feed(text[start:end])

    def first_error(self) -> int | None:
        """The number of the first line that looks like an error (as the parser reads lines: its
        escapes gone). Only lines holding one of _ERROR_WORDS are parsed, in order."""
        lower = self.text.lower()
        pos = 0
        while True:
            found = [i for word in _ERROR_WORDS if (i := lower.find(word, pos)) >= 0]
            if not found:
                return None
            hit = min(found)
            start = lower.rfind("\n", 0, hit) + 1
            end = lower.find("\n", hit) + 1
            number = lower.count("\n", 0, start) + 1
            line = self._parse(start, end, number)
            if line and line[0].group is None and not line[0].end_group and _ERROR.search(line[0].text):
                return number
            pos = end
