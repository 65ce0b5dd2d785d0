"""GitHub's size limits in one place, and the functions that keep text inside them.

Every number GitHub enforces on what we write lives here, so a change on GitHub's side is a
one-line edit and no renderer hard-codes its own guess. The soft caps below are ours: they keep a
comment readable, long before GitHub's hard limit would bite.
"""

from __future__ import annotations

# --- GitHub's hard limits ---------------------------------------------------------------------------

# An issue or PR comment body: "Body is too long (maximum is 65536 characters)".
COMMENT_BODY_MAX = 65_536
# A check run's output.summary and output.text (REST schema: maxLength 65535 each).
CHECK_SUMMARY_MAX = 65_535
CHECK_TEXT_MAX = 65_535
# Annotations per create/update request; later updates append to the run's list.
ANNOTATIONS_PER_REQUEST = 50
# An annotation's title is at most 255 characters; its message and raw_details at most 64 KB.
ANNOTATION_TITLE_MAX = 255
ANNOTATION_MESSAGE_MAX = 64 * 1024

# --- Our own caps -----------------------------------------------------------------------------------

# A check run's title: GitHub sets no limit, but the checks list shows one line of it.
CHECK_TITLE_MAX = 255
# Room kept free under each hard limit. We count UTF-16 code units (see github_len), which can
# only over-count what GitHub counts, and keep a margin on top for the truncation notes we add.
SAFETY_MARGIN = 512
# Annotations on one check run. Each 50 costs one API call; past this the rest are listed in the
# run's text instead, so a run with 20,000 lint findings does not make 400 calls.
ANNOTATIONS_PER_RUN_MAX = 1_000
# Failures annotated while the tests still run: the first few, each once (the final result adds
# its own); more would be a second copy of the final annotations.
EARLY_ANNOTATIONS_MAX = 10
# An annotation message is read in a hover box: the first lines of an error say what broke.
ANNOTATION_MESSAGE_SOFT_MAX = 4_000

# The sticky comment: how much of each failure is shown before the reader is sent elsewhere.
COMMENT_DETAILED_FAILURES = 10  # failing tests shown with their error and repro commands
COMMENT_LISTED_FAILURES = 100  # after those, failing tests listed by name only
COMMENT_ERROR_LINES = 12  # first lines of a test's error
COMMENT_ERROR_CHARS = 1_000
COMMENT_REPRO_CHARS = 1_000
COMMENT_DIFF_CHARS = 10_000  # pre-commit's diff, collapsed
COMMENT_HOOK_OUTPUTS = 5  # failed hooks shown with their output; later ones by name
COMMENT_HOOK_OUTPUT_CHARS = 2_000
COMMENT_FINDINGS = 50  # docstring findings listed
COMMENT_SELECTION_REASONS = 20  # groups of selected tests, one per reason
COMMENT_SELECTED_PER_REASON = 30  # selected tests listed under each reason
COMMENT_FLAKY = 50
COMMENT_RUN_ERROR_CHARS = 3_000
COMMENT_NOTICE_CHARS = 5_000  # a caller's notice (config problems, why a run stopped)

# A check run's text holds the full detail, within its own hard limit.
CHECK_ERROR_CHARS = 6_000  # one failing test's error in the tests run's text
CHECK_HOOK_OUTPUT_CHARS = 8_000
CHECK_LISTED_TESTS = 300  # failing or flaky tests named in a tests run's summary


def github_len(text: str) -> int:
    """The length GitHub may count: UTF-16 code units.

    GitHub's docs say "characters" without saying which; an emoji outside the Basic Multilingual
    Plane is one code point but two UTF-16 units. Counting units can only over-count, so staying
    under a limit by this measure stays under it by any.
    """
    return len(text.encode("utf-16-le")) // 2


def fits(text: str, limit: int) -> bool:
    return github_len(text) <= limit


def truncate(text: str, limit: int, *, what: str = "characters", where: str | None = None) -> str:
    """Cut ``text`` so that ``github_len`` of the result is at most ``limit``, saying so.

    The cut falls on a line boundary when one is near, so code blocks and tables are not split
    mid-line, and the note says how much was cut and ``where`` the rest can be read.
    """
    if limit < 0:
        raise ValueError(f"limit must be 0 or more, got {limit}")
    if fits(text, limit):
        return text
    note = f"\n… {{n:,}} {what} cut" + (f"; the rest is in {where}" if where else "") + "\n"
    # The note's own length depends on the number it reports; reserve room for the widest one.
    reserve = github_len(note.format(n=len(text)))
    if reserve >= limit:
        return _cut_units(text, limit)
    head = _cut_units(text, limit - reserve)
    newline = head.rfind("\n")
    if newline >= len(head) // 2:
        head = head[: newline + 1]
    return head.rstrip("\n") + note.format(n=len(text) - len(head))


def truncate_lines(text: str, max_lines: int, max_chars: int) -> str:
    """The first ``max_lines`` lines of ``text``, within ``max_chars``, with a note when cut."""
    lines = text.splitlines()
    shown = "\n".join(lines[:max_lines])
    if len(lines) > max_lines:
        shown += f"\n… {len(lines) - max_lines:,} more lines"
    return truncate(shown, max_chars)


def _cut_units(text: str, limit: int) -> str:
    """The longest prefix of ``text`` whose UTF-16 length is at most ``limit``."""
    if limit <= 0:
        return ""
    encoded = text.encode("utf-16-le")[: 2 * limit]
    # Never split a surrogate pair: drop a dangling high surrogate.
    return encoded.decode("utf-16-le", errors="ignore")
