"""The ``/retest-gpu`` comment command: grammar, parsing, merging and the usage reply.

Grammar, one command per line::

    /retest-gpu [failed | all] [perf] [env=NAME ...]
    /retest-gpu help

* No argument reruns the targeted selection, ``failed`` only the tests that failed in the last
  run, ``all`` the whole suite; ``perf`` also compares the benchmarks, base against head, where
  the config's ``performance.when`` lists ``command``. ``env=NAME`` (``NAME``: ``[A-Za-z0-9][A-Za-z0-9._-]*``, at most
  64 characters, the rule environment names follow in the config) picks the environment; it may
  stand anywhere among the arguments and may be repeated for several environments.
* The command word and the keywords are matched case-insensitively (``/Retest-GPU ALL`` works:
  nobody should lose a GPU run to their phone's autocapitalisation); environment names keep their
  case because the config's names are case-sensitive.
* A command must be alone on its line (surrounding whitespace is fine) and must be *visible prose*
  in the rendered comment: lines inside fenced code blocks (backticks or tildes, any length from
  three, an unclosed fence runs to the end), indented code blocks, blockquotes and HTML comments
  are ignored, so quoting someone's command, pasting a log or leaving a PR-template comment never
  starts a run. ``please /retest-gpu`` is a sentence, not a command; ``/retest-gpux`` is not ours.
* Several commands in one comment make ONE request: the widest scope wins
  (``all`` > default selection > ``failed``) and every named environment runs once; a command
  without ``env=`` names none, so next to one with ``env=`` it adds nothing.
* Any unknown argument, two different scopes on one line or a bad environment name is an error;
  a comment with an error runs nothing (a typo must not start the wrong, expensive run), and
  :func:`reply_for_errors` says what was wrong.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pydantic import Field

from bot.core.kinds import COMMAND
from bot.core.models import Model, RunScope

ENV_NAME_MAX = 64

_COMMAND_LINE = re.compile(re.escape(COMMAND) + r"(?:\s+(?P<args>.*))?", re.IGNORECASE)
_ENV_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_FENCE_OPEN = re.compile(r" {0,3}(?P<fence>`{3,}|~{3,})(?P<info>.*)")
_QUOTE = re.compile(r" {0,3}>")
_COMMENT_OPEN = "<!--"
_COMMENT_CLOSE = "-->"
# The widest scope wins when several commands are merged.
_SCOPE_RANK = {RunScope.FAILED: 0, RunScope.SELECTED: 1, RunScope.ALL: 2}
_SHOWN_ARG_MAX = 40


class RetestCommand(Model):
    """One ``/retest-gpu`` request. ``envs`` empty means: the environments the config selects."""

    scope: RunScope = RunScope.SELECTED
    envs: list[str] = Field(default_factory=list, description="environment names, each once")
    help: bool = Field(False, description="the user asked for the usage; reply, run nothing")
    perf: bool = Field(False, description="compare the benchmarks too (docs/performance.md)")


class CommandParse(Model):
    """Everything :func:`parse_comment` found in one comment body."""

    requests: list[RetestCommand] = Field(
        default_factory=list, description="each valid command line, in order"
    )
    command: RetestCommand | None = Field(
        None, description="the merged request; None when there is no command or any error"
    )
    errors: list[str] = Field(default_factory=list, description="one short line per problem")

    @property
    def found(self) -> bool:
        """Whether the comment addressed the bot at all (validly or not)."""
        return bool(self.requests or self.errors)


# --- Markdown: which lines are visible prose --------------------------------------------------------


@dataclass(frozen=True)
class _Fence:
    char: str
    length: int

    def closed_by(self, line: str) -> bool:
        # CommonMark: a closing fence uses the same character, is at least as long, may be
        # indented up to three spaces and carries no info string.
        stripped = line.lstrip(" ")
        if len(line) - len(stripped) > 3:
            return False
        run = len(stripped) - len(stripped.lstrip(self.char))
        return run >= self.length and not stripped[run:].strip()


def _fence_opened_by(line: str) -> _Fence | None:
    match = _FENCE_OPEN.fullmatch(line)
    if match is None:
        return None
    fence = match["fence"]
    # A backtick "fence" whose info string holds a backtick is inline code (```x```), not a fence.
    if fence[0] == "`" and "`" in match["info"]:
        return None
    return _Fence(fence[0], len(fence))


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _strip_comments(line: str, in_comment: bool) -> tuple[str, bool]:
    """Remove HTML-comment text from ``line``; returns the visible rest and the state after it."""
    visible: list[str] = []
    rest = line
    while rest:
        if in_comment:
            end = rest.find(_COMMENT_CLOSE)
            if end < 0:
                return "".join(visible), True
            rest = rest[end + len(_COMMENT_CLOSE) :]
            in_comment = False
        else:
            start = rest.find(_COMMENT_OPEN)
            if start < 0:
                visible.append(rest)
                break
            visible.append(rest[:start])
            rest = rest[start + len(_COMMENT_OPEN) :]
            in_comment = True
    return "".join(visible), in_comment


def _quote_content(line: str) -> str:
    """The text inside (possibly nested) ``>`` markers."""
    while _QUOTE.match(line):
        line = line.lstrip(" ")[1:]
        line = line.removeprefix(" ")
    return line


def _prose_lines(body: str) -> Iterator[tuple[int, str]]:
    """Yield ``(line number, text)`` for every line a reader sees as ordinary text.

    A small line-based subset of CommonMark, enough to keep commands that a reader would not see
    as commands from triggering: code (fenced and indented), quotes and HTML comments.
    """
    fence: _Fence | None = None
    in_comment = False
    in_indented_code = False
    # The start of a comment behaves like the line after a blank one: code may start there.
    after_blank = True
    # A paragraph inside a quote swallows the following lines until a blank one ("lazy
    # continuation"), so "> text\n/retest-gpu" renders the command inside the quote.
    in_quote_paragraph = False
    lines = body.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    for number, raw in enumerate(lines, start=1):
        line = raw.expandtabs(4)
        if fence is not None:
            if fence.closed_by(line):
                fence = None
                after_blank = True
            continue
        if in_comment:
            line, in_comment = _strip_comments(line, in_comment=True)
            if in_comment:
                continue
        if not line.strip():
            after_blank, in_quote_paragraph = True, False
            continue
        if in_quote_paragraph and _fence_opened_by(line) is None and not _QUOTE.match(line):
            continue
        in_quote_paragraph = False
        if _indent(line) >= 4 and (after_blank or in_indented_code):
            in_indented_code = True
            continue
        in_indented_code = False
        if _QUOTE.match(line):
            content = _quote_content(line)
            in_quote_paragraph = bool(content.strip()) and _fence_opened_by(content) is None
            after_blank = False
            continue
        fence = _fence_opened_by(line)
        if fence is not None:
            continue
        line, in_comment = _strip_comments(line, in_comment=False)
        after_blank = not line.strip()
        if line.strip():
            yield number, line


# --- Command lines ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _CommandLine:
    number: int
    text: str
    command: RetestCommand | None
    errors: tuple[str, ...]

    def key(self) -> tuple[object, ...]:
        """What makes two command lines "the same command" for edit detection."""
        if self.command is None:
            return ("invalid", " ".join(self.text.lower().split()))
        command = self.command
        return ("valid", command.scope, tuple(sorted(command.envs)), command.help, command.perf)


def _shown(arg: str) -> str:
    """An argument quoted back to the user: short, and unable to break out of inline code."""
    arg = arg.replace("`", "'")
    if len(arg) > _SHOWN_ARG_MAX:
        arg = arg[: _SHOWN_ARG_MAX - 3] + "..."
    return f"`{arg}`"


def _parse_args(args: list[str]) -> tuple[RetestCommand, list[str]]:
    scope: RunScope | None = None
    envs: list[str] = []
    wants_help = False
    perf = False
    errors: list[str] = []
    for arg in args:
        word = arg.lower()
        if word in (RunScope.FAILED, RunScope.ALL):
            new_scope = RunScope(word)
            if scope is not None and scope != new_scope:
                errors.append(f"`{scope}` and `{new_scope}` cannot be combined; pick one")
            scope = new_scope
        elif word == "help":
            wants_help = True
        elif word == "perf":
            perf = True
        elif word.startswith("env="):
            name = arg[len("env=") :]
            if not _ENV_NAME.fullmatch(name) or len(name) > ENV_NAME_MAX:
                errors.append(
                    f"{_shown(arg)}: an environment name starts with a letter or digit and has only "
                    f"letters, digits, `.`, `_` and `-` (at most {ENV_NAME_MAX})"
                )
            elif name not in envs:
                envs.append(name)
        else:
            errors.append(f"unknown argument {_shown(arg)}")
    command = RetestCommand(scope=scope or RunScope.SELECTED, envs=envs, help=wants_help, perf=perf)
    return command, errors


def _command_lines(body: str) -> list[_CommandLine]:
    found = []
    for number, line in _prose_lines(body):
        text = line.strip()
        match = _COMMAND_LINE.fullmatch(text)
        if match is None:
            continue
        command, errors = _parse_args((match["args"] or "").split())
        prefixed = tuple(f"line {number}: {e}" for e in errors)
        found.append(_CommandLine(number, text, None if errors else command, prefixed))
    return found


def merge_requests(requests: Iterable[RetestCommand]) -> RetestCommand | None:
    """Collapse several requests into one: the widest scope, every environment once, any help."""
    requests = list(requests)
    if not requests:
        return None
    scope = max((r.scope for r in requests), key=_SCOPE_RANK.__getitem__)
    envs = list(dict.fromkeys(env for r in requests for env in r.envs))
    return RetestCommand(
        scope=scope, envs=envs, help=any(r.help for r in requests), perf=any(r.perf for r in requests)
    )


def parse_comment(body: str) -> CommandParse:
    """Find the ``/retest-gpu`` commands in a comment body and merge them into one request."""
    lines = _command_lines(body)
    requests = [line.command for line in lines if line.command is not None]
    errors = [error for line in lines for error in line.errors]
    command = None if errors else merge_requests(requests)
    return CommandParse(requests=requests, command=command, errors=errors)


def is_new_command(old_body: str | None, new_body: str) -> bool:
    """Whether an edit (``old_body`` → ``new_body``) adds a command that was not there before.

    ``old_body`` is None for a new comment. Commands compare by meaning, not spelling, so fixing a
    typo elsewhere in the comment, or re-spacing the command, does not rerun the GPUs; adding a
    different command, or fixing a broken one, does. An added *invalid* command counts too, so
    the caller can answer it with :func:`reply_for_errors`.
    """
    new_keys = {line.key() for line in _command_lines(new_body)}
    old_keys = {line.key() for line in _command_lines(old_body)} if old_body else set()
    return bool(new_keys - old_keys)


# --- Replies ------------------------------------------------------------------------------------------


def usage_text() -> str:
    """The grammar and examples, in Markdown. No line of it parses as a command."""
    return "\n".join(
        [
            f"**`{COMMAND}` usage**: write the command on a line of its own, outside code blocks and quotes.",
            "",
            "| Comment | What runs |",
            "|---|---|",
            f"| `{COMMAND}` | the tests this change can affect |",
            f"| `{COMMAND} failed` | only the tests that failed in the last run |",
            f"| `{COMMAND} all` | the whole test suite |",
            f"| `{COMMAND} env=NAME` | the same, in the environment `NAME` from the config; "
            "repeat `env=` for several, combine with `failed` or `all` |",
            f"| `{COMMAND} perf` | the tests, and the benchmarks compared base against head, when the "
            "config's `performance.when` lists `command` |",
            f"| `{COMMAND} help` | this message |",
            "",
            f"Example: `{COMMAND} failed env=cuda12`. Several commands in one comment make one run.",
        ]
    )


def reply_for_errors(errors: Iterable[str]) -> str:
    """A short reply to a comment whose command could not be read: the problems, then the usage."""
    problems = "\n".join(f"- {error}" for error in errors)
    return f"I could not read this `{COMMAND}` command, so nothing ran:\n\n{problems}\n\n{usage_text()}"
