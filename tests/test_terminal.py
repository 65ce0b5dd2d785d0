"""A step's output as the run page shows it: colours as fixed class names, every other escape
dropped, lines numbered the same whether a log is read whole, by windows, or piece by piece."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.render.terminal import LogText, TerminalParser, render_lines

CLASS_WORDS = {"b", "d", "i", "u", *(f"fg{i}" for i in range(16)), *(f"bg{i}" for i in range(16))}


def segments(text: str) -> list[list[tuple[str, str]]]:
    return [line.segments for line in render_lines(text)[0]]


def test_colours_and_styles_become_class_names_and_reset():
    assert segments("\x1b[1;31mbold red\x1b[22m red\x1b[0m plain\n") == [
        [("b fg1", "bold red"), ("fg1", " red"), ("", " plain")]
    ]
    assert segments("\x1b[92;44mbright on blue\x1b[39;49mnone\n") == [
        [("fg10 bg4", "bright on blue"), ("", "none")]
    ]
    # 256 colours and true colour: the nearest of the 16
    assert segments("\x1b[38;5;196ma\x1b[38;2;0;200;0mb\x1b[48;5;21mc\n") == [
        [("fg1", "a"), ("fg2", "b"), ("fg2 bg4", "c")]
    ]


def test_every_other_escape_is_dropped_and_only_text_is_left():
    hostile = (
        "\x1b]8;;javascript:alert(1)\x1b\\link text\x1b]8;;\x1b\\ "  # OSC-8 hyperlink
        "\x1b]0;window title\x07"  # OSC title
        "\x1b[2J\x1b[H\x1b[10;20H\x1b[5A\x1b[K"  # screen and cursor
        "\x1b(B\x1b=\x9b31m\x07\x08\x00\x7f"  # charset, keypad, 8-bit CSI, controls
        "end\x1b\n"  # and a stray ESC
    )
    (line,) = segments(hostile)
    text = "".join(t for _, t in line)
    assert text == "link text end"
    assert all(cls == "" or set(cls.split()) <= CLASS_WORDS for cls, _ in line)


def test_a_carriage_return_overwrites_the_line_like_a_terminal():
    assert segments("downloading  10%\rdownloading 100%\r\n") == [[("", "downloading 100%")]]


def test_groups_and_the_first_error_line():
    lines, first_error = render_lines(
        "::group::Install\npip install\n::endgroup::\nok\nFAILED tests/a.py::t - AssertionError\nE   later\n"
    )
    assert (lines[0].group, lines[0].segments) == ("Install", [])
    assert lines[2].end_group and first_error == 5
    assert render_lines("::group::an error: in a title\nValueError: bad\n")[1] == 2
    assert render_lines("all good, 0 errors\n")[1] is None


def test_a_line_split_across_pieces_is_one_line_and_its_colour_goes_on():
    parser = TerminalParser()
    assert parser.feed("\x1b[33mhal") == []
    (line,) = parser.feed("f a line\nnext")
    assert (line.number, line.segments) == (1, [("fg3", "half a line")])
    (last,) = parser.feed("", final=True)
    assert (last.number, last.segments) == (2, [("fg3", "next")])


PIECES = st.sampled_from(
    [
        "a",
        "b c",
        "\n",
        "\x1b[31m",
        "\x1b[0m",
        "\x1b[1;4m",
        "::group::g\n",
        "::endgroup::\n",
        "E   x\n",
        "\r",
        "\x1b]8;;u\x1b\\",
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(PIECES, max_size=60), st.integers(1, 30), st.integers(0, 10), st.booleans())
def test_a_window_of_a_log_is_what_the_whole_log_has_there(pieces, first, span, final):
    text = "".join(pieces)
    parser = TerminalParser()
    whole = parser.feed(text, final=final)
    log = LogText(text, final=final)
    assert log.count == len(whole)
    assert log.lines(first, first + span) == whole[first - 1 : first + span]
    assert log.first_error() == parser.first_error
