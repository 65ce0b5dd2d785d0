"""The /retest-gpu grammar as a commenter meets it: what starts a run, what does not, what errors."""

from __future__ import annotations

import pytest

from bot.core.models import RunScope
from handlers.decisions.commands import (
    CommandParse,
    RetestCommand,
    is_new_command,
    merge_requests,
    parse_comment,
    reply_for_errors,
    usage_text,
)


def command(body: str) -> RetestCommand | None:
    parsed = parse_comment(body)
    assert parsed.errors == [], parsed.errors
    return parsed.command


def selected(*envs: str) -> RetestCommand:
    return RetestCommand(scope=RunScope.SELECTED, envs=list(envs))


# --- Plain commands ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("/retest-gpu", RetestCommand(scope=RunScope.SELECTED)),
        ("/retest-gpu failed", RetestCommand(scope=RunScope.FAILED)),
        ("/retest-gpu all", RetestCommand(scope=RunScope.ALL)),
        ("/retest-gpu help", RetestCommand(help=True)),
        ("/retest-gpu env=cuda12", selected("cuda12")),
        ("/retest-gpu env=cuda-12.1_x all", RetestCommand(scope=RunScope.ALL, envs=["cuda-12.1_x"])),
        ("/retest-gpu failed env=a env=b", RetestCommand(scope=RunScope.FAILED, envs=["a", "b"])),
        ("/retest-gpu env=a env=a", selected("a")),
        ("/retest-gpu all all", RetestCommand(scope=RunScope.ALL)),
        ("/retest-gpu perf", RetestCommand(perf=True)),
        ("/retest-gpu PERF all env=a", RetestCommand(scope=RunScope.ALL, envs=["a"], perf=True)),
        ("   /retest-gpu all   ", RetestCommand(scope=RunScope.ALL)),
        ("  /retest-gpu\tfailed\t", RetestCommand(scope=RunScope.FAILED)),
        ("/Retest-GPU", selected()),
        ("/RETEST-GPU ALL Env=ROCm6", RetestCommand(scope=RunScope.ALL, envs=["ROCm6"])),
    ],
)
def test_single_command(body: str, expected: RetestCommand) -> None:
    assert command(body) == expected


def test_command_among_prose() -> None:
    body = "Thanks for the review!\n\n/retest-gpu failed\n\nThe CUDA 12 job looked flaky."
    assert command(body) == RetestCommand(scope=RunScope.FAILED)


@pytest.mark.parametrize(
    "body",
    [
        "",
        "LGTM",
        "please /retest-gpu",
        "Could you /retest-gpu all?",
        "/retest-gpux",
        "/retest-gpu-all",
        "/retest-gpu: all",
        "/retest",
        "retest-gpu",
        "`/retest-gpu`",
        "- /retest-gpu",
        "**/retest-gpu**",
    ],
)
def test_not_a_command(body: str) -> None:
    parsed = parse_comment(body)
    assert parsed == CommandParse()
    assert not parsed.found


# --- Markdown that hides a command ----------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        "```\n/retest-gpu\n```",
        "```bash\n/retest-gpu all\n```",
        "``` python title='x'\n/retest-gpu\n```",
        "~~~\n/retest-gpu\n~~~",
        "~~~~text\n/retest-gpu\n~~~~",
        "   ```\n/retest-gpu\n   ```",
        # a longer fence is not closed by a shorter one
        "````\n```\n/retest-gpu\n```\n````",
        # a tilde fence is not closed by backticks, and the reverse
        "~~~\n```\n/retest-gpu\n~~~",
        "```\n~~~\n/retest-gpu\n```",
        # a closing fence carries no info string
        "```\n```not-a-close\n/retest-gpu\n```",
        # an unclosed fence runs to the end of the comment
        "Here is the log:\n```\nE   RuntimeError\n/retest-gpu",
        "~~~~\n/retest-gpu\n~~~",
        # indented code after a blank line, or at the very start
        "Output:\n\n    /retest-gpu\n",
        "    /retest-gpu",
        "\t/retest-gpu",
        "Log:\n\n    line one\n\n    /retest-gpu all\n",
        # quotes, nested quotes, and lazy continuation of a quoted paragraph
        "> /retest-gpu",
        "   > /retest-gpu all",
        "> > /retest-gpu",
        ">/retest-gpu",
        "> you said\n/retest-gpu",
        # HTML comments, one-line and multi-line, as PR templates leave them
        "<!-- /retest-gpu -->",
        "<!--\n/retest-gpu\n-->",
        "<!-- Describe your change.\n\n/retest-gpu all\n\n-->\nMy change.",
        "<!-- never closed\n/retest-gpu",
        "text <!-- x\n/retest-gpu\n--> more",
    ],
)
def test_hidden_command_is_ignored(body: str) -> None:
    assert parse_comment(body) == CommandParse()
    # CRLF and lone-CR line endings hide it just the same
    assert parse_comment(body.replace("\n", "\r\n")) == CommandParse()


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("```\ncode\n```\n/retest-gpu all", RetestCommand(scope=RunScope.ALL)),
        ("~~~\ncode\n~~~\n\n/retest-gpu", selected()),
        ("````\n```\n````\n/retest-gpu failed", RetestCommand(scope=RunScope.FAILED)),
        ("```\ncode\n``````\n/retest-gpu", selected()),  # a longer close is fine
        ("```inline``` text\n/retest-gpu", selected()),  # inline code, not a fence
        ("> quote\n\n/retest-gpu", selected()),
        ("> ```\n/retest-gpu", selected()),  # a fence in a quote ends with the quote
        ("<!-- note -->\n/retest-gpu", selected()),
        ("/retest-gpu <!-- why: flaky NCCL -->", selected()),
        ("<!--\ntemplate\n-->\n/retest-gpu env=a", selected("a")),
        ("some text\n    /retest-gpu", selected()),  # continues the paragraph: not code
        ("    code\n/retest-gpu", selected()),
    ],
)
def test_visible_command_next_to_markdown(body: str, expected: RetestCommand) -> None:
    assert command(body) == expected
    assert command(body.replace("\n", "\r\n")) == expected


def test_lone_cr_line_endings() -> None:
    assert command("hi\r/retest-gpu all\r") == RetestCommand(scope=RunScope.ALL)


# --- Several commands ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("/retest-gpu\n/retest-gpu", selected()),
        ("/retest-gpu failed\n/retest-gpu", selected()),
        ("/retest-gpu failed\n/retest-gpu all\n/retest-gpu", RetestCommand(scope=RunScope.ALL)),
        ("/retest-gpu failed\n/retest-gpu failed", RetestCommand(scope=RunScope.FAILED)),
        (
            "/retest-gpu env=a\n/retest-gpu failed env=b\n/retest-gpu env=a",
            RetestCommand(scope=RunScope.SELECTED, envs=["a", "b"]),
        ),
        ("/retest-gpu all\n/retest-gpu help", RetestCommand(scope=RunScope.ALL, help=True)),
    ],
)
def test_several_commands_make_one_request(body: str, expected: RetestCommand) -> None:
    parsed = parse_comment(body)
    assert len(parsed.requests) == body.count("/retest-gpu")
    assert parsed.command == expected


def test_merge_of_nothing_is_nothing() -> None:
    assert merge_requests([]) is None


# --- Errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("/retest-gpu foo", "unknown argument `foo`"),
        ("/retest-gpu all please", "unknown argument `please`"),
        ("/retest-gpu --all", "unknown argument `--all`"),
        ("/retest-gpu selected", "unknown argument `selected`"),
        ("/retest-gpu envs=a", "unknown argument `envs=a`"),
        ("/retest-gpu failed all", "`failed` and `all` cannot be combined"),
        ("/retest-gpu all failed", "`all` and `failed` cannot be combined"),
        ("/retest-gpu env=", "`env=`: an environment name"),
        ("/retest-gpu env=-x", "`env=-x`"),
        ("/retest-gpu env=a/b", "`env=a/b`"),
        ("/retest-gpu env=a,b", "`env=a,b`"),
        ("/retest-gpu env=" + "a" * 65, "at most 64"),
        ("/retest-gpu `rm`", "unknown argument `'rm'`"),
    ],
)
def test_parse_errors(body: str, fragment: str) -> None:
    parsed = parse_comment(body)
    assert parsed.command is None
    assert len(parsed.errors) == 1
    assert fragment in parsed.errors[0]
    assert parsed.errors[0].startswith("line 1: ")
    assert parsed.found


def test_error_anywhere_runs_nothing_and_names_the_line() -> None:
    parsed = parse_comment("/retest-gpu all\n\n/retest-gpu env=bad!name")
    assert parsed.requests == [RetestCommand(scope=RunScope.ALL)]  # kept, so nothing is lost
    assert parsed.command is None
    assert parsed.errors[0].startswith("line 3: `env=bad!name`")


def test_long_junk_argument_is_shortened() -> None:
    parsed = parse_comment("/retest-gpu " + "x" * 500)
    assert len(parsed.errors[0]) < 100


def test_env_name_of_64_characters_is_fine() -> None:
    assert command("/retest-gpu env=" + "a" * 64) == selected("a" * 64)


# --- Edits -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "triggers"),
    [
        (None, "/retest-gpu", True),
        (None, "just a comment", False),
        (None, "/retest-gpu nope", True),  # a new (bad) command: answer it with the errors
        ("/retest-gpu\nThe flakey test", "/retest-gpu\nThe flaky test", False),
        ("/retest-gpu all", "/retest-gpu   ALL", False),
        ("/retest-gpu env=a env=b", "/retest-gpu env=b env=a", False),
        ("/retest-gpu", "/retest-gpu\n/retest-gpu", False),
        ("/retest-gpu all\n/retest-gpu", "/retest-gpu all", False),  # removing one
        ("/retest-gpu", "", False),
        ("LGTM", "LGTM\n\n/retest-gpu", True),
        ("/retest-gpu", "/retest-gpu all", True),
        ("/retest-gpu", "/retest-gpu env=cuda", True),
        ("/retest-gpu alll", "/retest-gpu all", True),  # fixing a broken command
        ("/retest-gpu alll", "/retest-gpu alll\nthanks", False),
        ("```\n/retest-gpu\n```", "/retest-gpu", True),  # out of the code block: now visible
        ("/retest-gpu", "```\n/retest-gpu\n```", False),
        ("", "/retest-gpu", True),
        ("/retest-gpu failed\r\n", "/retest-gpu failed\n", False),
    ],
)
def test_edit_triggers_only_when_it_adds_a_command(old: str | None, new: str, triggers: bool) -> None:
    assert is_new_command(old, new) is triggers


# --- Replies -----------------------------------------------------------------------------------------


def test_usage_lists_every_form_and_never_triggers_itself() -> None:
    text = usage_text()
    for form in ("`/retest-gpu`", "`/retest-gpu failed`", "`/retest-gpu all`", "env=NAME", "help"):
        assert form in text
    # Somebody may quote or paste the bot's reply; it must not start a run.
    assert parse_comment(text) == CommandParse()


def test_error_reply_shows_problems_and_usage() -> None:
    errors = parse_comment("/retest-gpu foo").errors
    reply = reply_for_errors(errors)
    assert "- line 1: unknown argument `foo`" in reply
    assert usage_text() in reply
    assert "nothing ran" in reply
    assert parse_comment(reply) == CommandParse()
