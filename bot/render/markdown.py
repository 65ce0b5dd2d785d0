"""Text from a pull request or its run, made inert before it reaches GitHub Markdown.

Everything a run produces is written by the pull request's author: test names and what tests
print, hook ids and output, names in the code, paths, values a contributor pasted. GitHub renders
the summary comment and the check runs as Markdown with raw HTML allowed, then links
``@user`` / ``@org/team`` mentions (which notify), ``#123`` references (which add an event to
that issue) and bare URLs. Unescaped, a failing test could ping a team, close our
``<details>``, add images or links, inject a second sticky marker, or hide the rest of the
comment in an HTML comment.

So every string from a run goes into Markdown through exactly one of these functions, chosen by
where it lands:

========================  ==================================================================
:func:`text`              a line of prose (paragraph, list item, heading, bold label)
:func:`prose`             the same, where the string may carry our own ```code``` spans
:func:`cell`              a table cell
:func:`code`              an inline code span
:func:`fence`             a fenced block (output, tracebacks, diffs)
:func:`html_text`         text inside raw HTML, where Markdown is not parsed (``<summary>``)
:func:`plain`             fields GitHub shows as plain text (check-run titles, annotations)
:func:`url`               a link the reader may follow (shown as itself, http(s) only)
========================  ==================================================================

What GitHub links is decided after Markdown is rendered, on the HTML's text nodes, skipping
those inside ``<pre>``, ``<code>`` and ``<a>`` (html-pipeline's ``MentionFilter``). So code keeps
its text as it is (readable, copyable), and everything outside code has mentions and references
broken with a zero-width space after ``@`` / ``#`` (invisible; GitHub's own Dependabot does the
same). The one thing code cannot keep is ``<!--``: our comment is found by its marker, so no
input may write another marker, even inside code.
"""

from __future__ import annotations

import html
import re

ZWSP = "\u200b"

# GitHub links "@name" and "@org/team" only after a non-word character and with a letter or
# digit right after "@"; in Markdown text it also links "user@host.org" as an e-mail address.
# Issue references need a digit after "#", with or without a repository before it. A zero-width
# space in between breaks each. Plain-text fields break only mentions, so "image@sha256:…" in a
# repro command stays as people copy it.
_AT = re.compile(r"@(?=\S)")
_MENTION = re.compile(r"(?<![A-Za-z0-9_])@(?=[A-Za-z0-9])")
_REFERENCE = re.compile(r"#(?=[0-9])")
# Characters with meaning inside a Markdown line: code, emphasis, links and images, tables,
# strikethrough, math, the escape itself. "<", ">" and "&" become entities instead.
_INLINE_SYNTAX = re.compile(r"([\\`*_\[\]|~$!])")
# What makes GitHub turn plain text into a link: "scheme://" and "www."
_AUTOLINK = re.compile(r"(?i)(://)|(www)\.")
# A line that starts like a block: list item, heading, thematic break or setext underline,
# ordered list ("1. ", not "1.5").
_BLOCK_START = re.compile(r"^(?:([-+=#])(?=[-+=#\s]|$)|(\d{1,9})([.)])(?=\s|$))")
_COMMENT_OPEN = "<!--"
_CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.DOTALL)


def _one_line(s: str) -> str:
    return " ".join(s.replace("\0", "\ufffd").split())


def _unlink(s: str, at: re.Pattern[str] = _AT) -> str:
    """Break mentions, e-mail links and issue references; nothing visible changes."""
    return _REFERENCE.sub("#" + ZWSP, at.sub("@" + ZWSP, s))


def _no_comment(s: str) -> str:
    """Text kept verbatim (code) must still not open an HTML comment, nor repeat our marker."""
    return s.replace("\0", "\ufffd").replace(_COMMENT_OPEN, "<!" + ZWSP + "--")


def _escape_inline(s: str) -> str:
    s = html.escape(s, quote=False)
    s = _INLINE_SYNTAX.sub(r"\\\1", s)
    s = _AUTOLINK.sub(lambda m: "\\://" if m[1] else m[2] + "\\.", s)
    return _unlink(s)


def _guard_block_start(s: str) -> str:
    return _BLOCK_START.sub(lambda m: "\\" + m[1] if m[1] else m[2] + "\\" + m[3], s, count=1)


def text(s: str) -> str:
    """A string from a run as one line of Markdown text that renders as exactly that text.

    No HTML, links, images, emphasis, code, mentions or references can come out of it, and it
    cannot start a list, heading or quote. Cut it to length *before* this, never after: a cut
    could separate an escape from what it escapes.
    """
    return _guard_block_start(_escape_inline(_one_line(s)))


def prose(s: str) -> str:
    """Like :func:`text`, but ```spans``` in ``s`` stay code: for messages that quote names.

    The runner's own messages quote paths and names in backticks (``\\`tests/x.py\\` changed``).
    Whatever the quoted part holds, it only ever becomes a code span or escaped text.
    """
    line = _one_line(s)
    out: list[str] = []
    pos = 0
    for m in _CODE_SPAN.finditer(line):
        out.append(_escape_inline(line[pos : m.start()]))
        out.append(code(m[2].strip(" ") or m[2]))
        pos = m.end()
    out.append(_escape_inline(line[pos:]))
    return _guard_block_start("".join(out))


def cell(s: str | None) -> str:
    """A table cell: :func:`text`, with a dash for a missing value."""
    return "—" if s is None or s == "" else text(s)


def code(s: str, *, in_table: bool = False) -> str:
    """Inline code that no backtick in ``s`` can close early (a longer delimiter, CommonMark)."""
    s = _no_comment(" ".join(s.splitlines()))
    run = max((len(m) for m in re.findall(r"`+", s)), default=0)
    tick = "`" * (run + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    span = f"{tick}{pad}{s}{pad}{tick}"
    # A table splits its rows at "|" before it parses code spans; "\|" is GFM's way to keep one.
    return span.replace("|", "\\|") if in_table else span


def fence(s: str, lang: str = "") -> str:
    """A fenced block longer than any backtick run in ``s``, so no line of it can close the block.

    Tildes cannot close a backtick fence, so ``~~~`` in the output is harmless too.
    """
    s = _no_comment(s)
    run = max((len(m) for m in re.findall(r"`{3,}", s)), default=0)
    tick = "`" * max(3, run + 1)
    return f"{tick}{lang}\n{s.rstrip()}\n{tick}"


def html_text(s: str) -> str:
    """Text inside raw HTML (``<summary>``): GitHub parses no Markdown there, only HTML."""
    return _unlink(html.escape(_one_line(s), quote=True))


def plain(s: str) -> str:
    """Fields GitHub shows as plain text (check-run titles, annotation messages and titles).

    Nothing there is Markdown; mentions are broken anyway, since a title or an annotation is
    quoted wherever people discuss a check.
    """
    return _unlink(_no_comment(s), _MENTION)


def url(s: str) -> str:
    """A link from a run, shown as itself: an http(s) URL becomes an autolink, anything else code.

    An autolink's text is its target, so a reader sees where it goes; ``javascript:`` and other
    schemes never become links.
    """
    if re.fullmatch(r"https?://[^\s<>`\\\"']+", s):
        return f"<{s}>"
    return code(s)
