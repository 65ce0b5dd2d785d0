"""Text from a run, put into Markdown: it renders as exactly that text, and GitHub links nothing in it.

Each function of :mod:`bot.render.markdown` is checked by rendering its output with GitHub's own Markdown
library (``markdown_check``) and reading back what a reader would see, for hand-picked attacks
and for thousands of random strings made of Markdown's special characters.
"""

from __future__ import annotations

import os
import random

import pytest
from markdown_check import inspect, live_mentions

from bot.render import markdown as md

ATTACKS = [
    "@octocat and @octo-org/maintainers, cc @a.",
    "(@octocat) see octo-org/calc#1 and #2",
    "<img src=x onerror=alert(1)> <script>alert(1)</script>",
    "</details></summary><details open>",
    "<!-- paritybot:sticky --> <!-- the rest is hidden",
    "[click](javascript:alert(1)) ![](http://tracker.example/p.png) [ref]: http://x",
    "www.evil.example and http://evil.example/x and <http://evil.example>",
    "**bold** _it_ ~~gone~~ `code` ``two`` $x^2$ \\` \\",
    "| a | b |",
    "- list item",
    "+ plus",
    "# heading",
    "1. ordered",
    "2) ordered",
    "> quote",
    "---",
    "===",
    "    indented code",
    "&lt;b&gt; &amp; &#64;octocat",
    "a\nb\r\nc\rd",
    "tests/test_x.py::test_y[a-b]",
    "1.26.4",
    "a\0b",
]
SPECIALS = "`*_[]()!<>&|~$#@-+=.:/\\ \n\tabcw1:"


def _random_strings(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = ["www.", "http://", "@octo", "@a/b", "#1", "<!--", "-->", "</details>", "```", "~~~", "![", "]("]
    out = []
    for _ in range(count):
        parts = [
            rng.choice(words) if rng.random() < 0.2 else rng.choice(SPECIALS)
            for _ in range(rng.randint(1, 24))
        ]
        out.append("".join(parts))
    return out


# A few hundred random strings of Markdown's special characters and attack fragments; run with
# MARKDOWN_FUZZ=5000 to try more.
FUZZ = _random_strings(int(os.environ.get("MARKDOWN_FUZZ", "300")), seed=8)


def _seen(s: str) -> str:
    """What a reader sees of a one-line text: whitespace collapsed, invisible spaces not seen."""
    return " ".join(s.replace("\0", "\ufffd").split())


def _shown_text(body: str) -> str:
    page = inspect(body)
    return "".join(page.text_outside_code + page.code_text).replace(md.ZWSP, "").strip()


@pytest.mark.parametrize("s", ATTACKS + FUZZ)
def test_text_renders_as_itself_with_nothing_linked(s: str) -> None:
    page = inspect(md.text(s))
    assert [t for t, _ in page.tags] in ([], ["p"]), page.html  # one paragraph, nothing else
    assert page.comments == [] and page.live == []
    assert _shown_text(md.text(s)) == _seen(s)


@pytest.mark.parametrize("s", ATTACKS + FUZZ)
def test_text_inside_our_markup_stays_inside_it(s: str) -> None:
    # In a list item, bold, after our own words, and in a table cell: what we wrap stays wrapped.
    body = f"- **{md.text(s)}** — {md.text(s)}\n\n| a | b |\n|---|---|\n| {md.cell(s)} | x |\n"
    page = inspect(body)
    assert page.count("li") == 1 and page.count("td") == 2, page.html
    assert page.count("strong") == (1 if s.strip() else 0), page.html
    assert page.comments == [] and page.live == [] and page.unbalanced == []
    assert not {t for t, _ in page.tags} - {"ul", "li", "strong", "table", "thead", "tbody", "tr", "th", "td"}


@pytest.mark.parametrize("s", ATTACKS + FUZZ)
def test_code_is_one_code_span_holding_the_text(s: str) -> None:
    page = inspect(f"see {md.code(s)} here")
    assert [t for t, _ in page.tags] in ([], ["p"]) or page.count("code") == 1, page.html
    if s.strip():
        assert page.count("code") == 1
        shown = "".join(page.code_text).replace(md.ZWSP, "")
        assert " ".join(shown.split()) == " ".join(s.replace("\0", "\ufffd").split())
    assert page.comments == [] and page.live == []


@pytest.mark.parametrize("s", ATTACKS + FUZZ)
def test_code_in_a_table_cell_keeps_its_pipes(s: str) -> None:
    page = inspect(f"| a | b |\n|---|---|\n| {md.code(s, in_table=True)} | x |\n")
    assert page.count("td") == 2, page.html


@pytest.mark.parametrize("s", [*ATTACKS, "```\n@octocat\n```", "~~~\n</details>\n~~~", "`````x"])
def test_fence_holds_any_output_to_the_end(s: str) -> None:
    body = "<details>\n<summary>x</summary>\n\n" + md.fence(s + "\n" + s, "text") + "\n\n</details>\n\nafter"
    page = inspect(body)
    assert page.count("pre") == 1 and page.unbalanced == [] and page.comments == [], page.html
    assert page.live == []
    words = [t.strip() for t in page.text_outside_code if t.strip()]
    assert words == ["x", "after"]  # the block closed where we closed it


def test_code_keeps_mentions_and_addresses_as_they_are() -> None:
    # GitHub links nothing inside code, and people copy commands out of it.
    assert md.code("pip install x@git+https://h/x") == "`pip install x@git+https://h/x`"
    assert md.fence("@pytest.mark.slow\ndef test(): ...") == "```\n@pytest.mark.slow\ndef test(): ...\n```"


def test_no_input_writes_an_html_comment_or_our_marker() -> None:
    for out in (md.code("<!-- paritybot:sticky -->"), md.fence("<!-- paritybot:sticky -->")):
        assert "<!--" not in out and "paritybot:sticky" in out
    assert "<!--" not in md.plain("<!-- paritybot:sticky -->")


@pytest.mark.parametrize(
    ("s", "expected"),
    [
        ("@octocat failed", "@\u200boctocat failed"),
        ("image@sha256:abc", "image@sha256:abc"),  # not a mention on GitHub: kept for copying
        ("see octo-org/calc#12", "see octo-org/calc#\u200b12"),
        ("<b>", "<b>"),  # plain text: nothing is HTML there
    ],
)
def test_plain_breaks_only_what_github_would_link(s: str, expected: str) -> None:
    assert md.plain(s) == expected
    assert live_mentions(md.plain(s)) == []


@pytest.mark.parametrize("s", ATTACKS)
def test_html_text_in_a_summary(s: str) -> None:
    body = f"<details>\n<summary>{md.html_text(s)}</summary>\n\nbody\n\n</details>"
    page = inspect(body)
    assert [t for t, _ in page.tags] == ["details", "summary", "p"], page.html
    assert page.live == [] and page.comments == [] and page.unbalanced == []
    shown = [t.strip() for t in page.text_outside_code if t.strip()]
    assert [t.replace(md.ZWSP, "") for t in shown] == [_seen(s), "body"]


@pytest.mark.parametrize(
    ("s", "expected"),
    [
        ("`src/**` changed", "`src/**` changed"),
        ("adds dependency `@octo/pkg`, cc @octo", "adds dependency `@octo/pkg`, cc @\u200bocto"),
        ("a ``b`c`` d", "a ``b`c`` d"),
        ("unclosed `tick <b>", "unclosed \\`tick &lt;b&gt;"),
    ],
)
def test_prose_keeps_our_code_spans(s: str, expected: str) -> None:
    assert md.prose(s) == expected


@pytest.mark.parametrize("s", ATTACKS + FUZZ)
def test_prose_is_as_inert_as_text(s: str) -> None:
    page = inspect(f"- {md.prose(s)}")
    assert page.count("li") <= 1 and page.live == [] and page.comments == []
    assert not {t for t, _ in page.tags} - {"ul", "li", "code", "p"}, page.html


@pytest.mark.parametrize(
    ("s", "expected"),
    [
        ("https://github.com/acme/rfcs/pull/7", "<https://github.com/acme/rfcs/pull/7>"),
        ("javascript:alert(1)", "`javascript:alert(1)`"),
        ("http://x/<img>", "`http://x/<img>`"),
    ],
)
def test_url_is_a_link_only_when_it_shows_its_target(s: str, expected: str) -> None:
    assert md.url(s) == expected
    links = inspect(md.url(s)).links()
    assert links == ([s] if expected.startswith("<") else [])
