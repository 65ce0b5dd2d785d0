"""What GitHub makes of a Markdown body, for tests: rendered, then read as GitHub's filters read it.

The body is rendered with cmark-gfm (GitHub's own Markdown library, through ``cmarkgfm``) with raw
HTML kept, as GitHub keeps it before its sanitiser. Then the HTML is walked the way GitHub's
link filters walk it (html-pipeline's ``MentionFilter`` and ``TeamMentionFilter``): only text
nodes outside ``<pre>``, ``<code>``, ``<a>``, ``<style>`` and ``<script>`` are searched, with
GitHub's own patterns. A mention found there is *live*: GitHub would link it and notify.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

import cmarkgfm
from cmarkgfm.cmark import Options

# html-pipeline's patterns, ported: "@login" and "@org/team" after the start of a line or a
# non-word character (ASCII, as in Ruby); issue references, with or without a repository.
_USER = re.compile(
    r"(?<!\w)@([a-z0-9][a-z0-9-]*+)(?!/)(?=\.+[ \t\W]|\.+$|[^0-9a-zA-Z_.]|$)", re.I | re.A | re.M
)
_TEAM = re.compile(r"(?<!\w)@([a-z0-9][a-z0-9-]*)/([a-z0-9][a-z0-9\-_]*)\b", re.I | re.A)
_REFERENCE = re.compile(r"#(\d+)\b", re.A)  # "#12", "org/repo#12": any digits after "#"
_IGNORED_PARENTS = frozenset({"pre", "code", "a", "style", "script"})
_VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "wbr", "source"})


def render(body: str) -> str:
    """The HTML GitHub's Markdown library makes of ``body`` (tables, autolinks, raw HTML kept)."""
    return cmarkgfm.github_flavored_markdown_to_html(body, options=Options.CMARK_OPT_UNSAFE)


def live_mentions(text: str) -> list[str]:
    """The mentions and issue references GitHub would link in one text node."""
    found = [m[0].strip() for m in _TEAM.finditer(text)]
    found += [m[0].strip() for m in _USER.finditer(text)]
    found += [m[0] for m in _REFERENCE.finditer(text)]
    return found


@dataclass
class Rendered:
    """One body, as GitHub would show it."""

    html: str
    tags: list[tuple[str, dict[str, str | None]]] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    live: list[str] = field(default_factory=list)
    unbalanced: list[str] = field(default_factory=list)
    text_outside_code: list[str] = field(default_factory=list)
    code_text: list[str] = field(default_factory=list)

    def links(self) -> list[str]:
        return [attrs.get("href") or "" for tag, attrs in self.tags if tag == "a"]

    def count(self, tag: str) -> int:
        return sum(1 for t, _ in self.tags if t == tag)


class _Walker(HTMLParser):
    def __init__(self, out: Rendered):
        super().__init__(convert_charrefs=True)
        self.out = out
        self.stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.out.tags.append((tag, dict(attrs)))
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.out.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            # An end tag that closes something other than the innermost open element: the
            # structure was broken (an input's "</details>" closing ours, say).
            self.out.unbalanced.append(f"</{tag}> while {self.stack[-1:] or 'nothing'} is open")
            if tag in self.stack:
                while self.stack.pop() != tag:
                    pass
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        if _IGNORED_PARENTS & set(self.stack):
            self.out.code_text.append(data)
            return
        self.out.text_outside_code.append(data)
        self.out.live += live_mentions(data)

    def handle_comment(self, data: str) -> None:
        self.out.comments.append(data)

    def close(self) -> None:
        super().close()
        self.out.unbalanced += [f"<{tag}> never closed" for tag in self.stack]


def inspect(body: str) -> Rendered:
    """Render ``body`` and record its tags, HTML comments, live mentions and broken nesting."""
    html = render(body)
    out = Rendered(html=html)
    walker = _Walker(out)
    walker.feed(html)
    walker.close()
    return out
