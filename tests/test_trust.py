"""Who may run code on the GPU machines: the whole trust matrix, config extensions and lookups."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from bot.core.config import TrustSettings, parse_repo_config
from handlers.decisions.commands import parse_comment
from handlers.decisions.trust import (
    Approval,
    Commenter,
    Lookup,
    PrFacts,
    TrustDecision,
    UserFacts,
    commenter_from_payload,
    decide_comment,
    decide_pr_run,
    needs_lookup,
    pr_facts_from_payload,
    untrusted_pr_note,
    who_can_approve,
)
from handlers.events import Comment, PullRequest, User

HEAD = "c0ffee1234567890c0ffee1234567890c0ffee12"
OLDER = "0123456789abcdef0123456789abcdef01234567"
AUTHOR = "contrib"
MAINTAINER = "maint"
PASSERBY = "passerby"

AUTHOR_ASSOCIATIONS = ["OWNER", "MEMBER", "COLLABORATOR", "CONTRIBUTOR", "FIRST_TIME_CONTRIBUTOR", "NONE"]
FORK = [True, False]
# "none": no comment, the PR event itself (opened / synchronize); "author": the PR's author
# comments; "trusted": a maintainer comments; "untrusted": somebody else comments.
COMMENTERS = ["none", "author", "trusted", "untrusted"]
APPROVALS = ["none", "this", "older"]


def pr(association: str = "NONE", fork: bool = True, author: str = AUTHOR) -> PrFacts:
    return PrFacts(author_login=author, author_association=association, is_fork=fork, head_sha=HEAD)


def approvals_for(kind: str) -> set[Approval]:
    sha = {"none": None, "this": HEAD, "older": OLDER}[kind]
    return set() if sha is None else {Approval(sha=sha, approver=MAINTAINER)}


def looked_up(settings: TrustSettings, login: str, association: str) -> UserFacts | None:
    """What the caller would learn from the lookups asked for: a user with read access only."""
    lookup = needs_lookup(settings, login, association)
    if not lookup.needed:
        return None
    return UserFacts(
        permission="read" if lookup.permission else None, team_member=False if lookup.teams else None
    )


def decide(
    author_association: str, fork: bool, commenter: str, approval: str, settings: TrustSettings | None = None
) -> TrustDecision:
    settings = settings or TrustSettings()
    facts_pr = pr(author_association, fork)
    approvals = approvals_for(approval)
    author_facts = looked_up(settings, AUTHOR, author_association)
    if commenter == "none":
        return decide_pr_run(settings, facts_pr, approvals, author_facts)
    who = {
        "author": Commenter(login=AUTHOR, association=author_association),
        "trusted": Commenter(login=MAINTAINER, association="MEMBER"),
        "untrusted": Commenter(login=PASSERBY, association="NONE"),
    }[commenter]
    facts = looked_up(settings, who.login, who.association)
    return decide_comment(settings, facts_pr, who, approvals, facts, author_facts)


# --- The whole matrix ------------------------------------------------------------------------------


def expected_run(author_association: str, commenter: str, approval: str) -> bool:
    """The rule, written out plainly: a maintainer's comment always runs (and approves); nobody
    else's comment runs; otherwise the PR runs when its author is trusted or THIS commit is approved.
    Forks change nothing: an untrusted author is untrusted wherever the branch lives."""
    author_trusted = author_association in ("OWNER", "MEMBER", "COLLABORATOR")
    if commenter == "trusted":
        return True
    if commenter == "untrusted":
        return False
    return author_trusted or approval == "this"


def _row_id(row: tuple[str, bool, str, str, bool]) -> str:
    association, fork, commenter, approval, run = row
    return (
        f"{association}-{'fork' if fork else 'branch'}-comment:{commenter}-approved:{approval}"
        f"-{'RUN' if run else 'NO-RUN'}"
    )


MATRIX = [
    (association, fork, commenter, approval, expected_run(association, commenter, approval))
    for association, fork, commenter, approval in itertools.product(
        AUTHOR_ASSOCIATIONS, FORK, COMMENTERS, APPROVALS
    )
]

# Rows written out by hand, checked literally (and against the generated ones).
LITERAL_ROWS = [
    ("NONE", True, "none", "none", False),
    ("NONE", True, "none", "older", False),
    ("NONE", True, "none", "this", True),
    ("FIRST_TIME_CONTRIBUTOR", True, "trusted", "older", True),
    ("FIRST_TIME_CONTRIBUTOR", False, "author", "none", False),
    ("CONTRIBUTOR", False, "author", "this", True),
    ("CONTRIBUTOR", False, "author", "older", False),
    ("CONTRIBUTOR", True, "untrusted", "this", False),
    ("MEMBER", True, "untrusted", "none", False),
    ("MEMBER", True, "none", "none", True),
    ("OWNER", False, "none", "none", True),
    ("COLLABORATOR", True, "author", "older", True),
]


def test_matrix_is_complete_and_agrees_with_the_literal_rows() -> None:
    assert len(MATRIX) == 6 * 2 * 4 * 3
    assert set(LITERAL_ROWS) <= set(MATRIX)


@pytest.mark.parametrize("row", MATRIX + LITERAL_ROWS, ids=_row_id)
def test_trust_matrix(row: tuple[str, bool, str, str, bool]) -> None:
    association, fork, commenter, approval, run = row
    decision = decide(association, fork, commenter, approval)
    assert decision.run is run
    assert decision.reason
    assert not decision.ignored
    author_trusted = association in ("OWNER", "MEMBER", "COLLABORATOR")
    # A maintainer's comment on an untrusted author's PR approves exactly this head commit.
    approves = commenter == "trusted" and not author_trusted
    assert decision.approve_sha == (HEAD if approves else None)
    waiting = not author_trusted and approval != "this" and commenter != "trusted"
    assert decision.needs_approval is waiting
    # Only a trusted author's code may go to a host runner: an approval never makes it so.
    assert decision.author_trusted is (run and author_trusted)
    if waiting and commenter != "untrusted":
        assert f"`{HEAD[:7]}`" in decision.reason
        assert "`/retest-gpu`" in decision.reason


# --- Stories --------------------------------------------------------------------------------------


def test_new_push_by_untrusted_author_needs_a_new_approval() -> None:
    settings = TrustSettings()
    first = pr("FIRST_TIME_CONTRIBUTOR").model_copy(update={"head_sha": OLDER})
    assert not decide_pr_run(settings, first, set()).run

    maintainer = Commenter(login="Maint", association="COLLABORATOR")
    approve = decide_comment(settings, first, maintainer, set())
    assert approve.run and approve.approve_sha == OLDER
    approvals = {Approval(sha=approve.approve_sha, approver=maintainer.login)}
    assert decide_pr_run(settings, first, approvals).run
    assert "@Maint" in decide_pr_run(settings, first, approvals).reason

    pushed = first.model_copy(update={"head_sha": HEAD})
    after_push = decide_pr_run(settings, pushed, approvals)
    assert not after_push.run and after_push.needs_approval
    assert "earlier commit" in after_push.reason and HEAD[:7] in after_push.reason
    author_retry = decide_comment(settings, pushed, Commenter(login=AUTHOR), approvals)
    assert not author_retry.run


def test_sha_comparison_ignores_case() -> None:
    approvals = {Approval(sha=HEAD.upper(), approver=MAINTAINER)}
    assert decide_pr_run(TrustSettings(), pr(), approvals).run


def test_author_login_case_does_not_matter_for_own_comment() -> None:
    approvals = approvals_for("this")
    decision = decide_comment(TrustSettings(), pr(), Commenter(login=AUTHOR.upper()), approvals)
    assert decision.run


# --- Bots --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "commenter",
    [
        Commenter(login="paritybot[bot]", association="MEMBER"),
        Commenter(login="Renovate[BOT]", association="NONE"),
        Commenter(login="ci-dispatch", association="OWNER", is_bot=True),
    ],
)
def test_bot_comments_are_ignored(commenter: Commenter) -> None:
    decision = decide_comment(TrustSettings(), pr("MEMBER"), commenter, approvals_for("this"))
    assert decision.ignored and not decision.run and decision.approve_sha is None


def test_bot_needs_no_lookup_and_can_be_trusted_by_name() -> None:
    settings = TrustSettings(users=["dependabot[bot]"])
    assert not needs_lookup(TrustSettings(), "dependabot[bot]", "NONE").needed
    bot_pr = pr("NONE", fork=False, author="dependabot[bot]")
    assert not decide_pr_run(TrustSettings(), bot_pr, set()).run
    assert decide_pr_run(settings, bot_pr, set()).run


# --- Config extensions ---------------------------------------------------------------------------


def test_config_adds_an_association() -> None:
    settings = TrustSettings(associations=["OWNER", "MEMBER", "COLLABORATOR", "CONTRIBUTOR"])
    assert decide("CONTRIBUTOR", True, "none", "none", settings).run
    assert decide("CONTRIBUTOR", True, "author", "none", settings).run
    assert not decide("FIRST_TIME_CONTRIBUTOR", True, "none", "none", settings).run
    contributor = Commenter(login="helpful", association="CONTRIBUTOR")
    approval = decide_comment(settings, pr("NONE"), contributor, set())
    assert approval.run and approval.approve_sha == HEAD


def test_config_can_remove_an_association() -> None:
    settings = TrustSettings(associations=["OWNER", "MEMBER"], permission_check=False)
    assert not decide_pr_run(settings, pr("COLLABORATOR"), set()).run


def test_named_user_is_trusted_case_insensitively() -> None:
    settings = TrustSettings(users=["Contrib"])
    assert needs_lookup(settings, AUTHOR, "NONE") == Lookup(login=AUTHOR)
    assert decide_pr_run(settings, pr("NONE"), set()).run
    assert decide_comment(settings, pr("NONE", author="other"), Commenter(login="CONTRIB"), set()).run


def test_team_membership() -> None:
    settings = TrustSettings(teams=["acme/gpu-maintainers"])
    lookup = needs_lookup(settings, AUTHOR, "CONTRIBUTOR")
    assert lookup.teams == ["acme/gpu-maintainers"]
    assert decide_pr_run(settings, pr("CONTRIBUTOR"), set(), UserFacts(team_member=True)).run
    assert not decide_pr_run(settings, pr("CONTRIBUTOR"), set(), UserFacts(team_member=False)).run
    # membership in some team means nothing when the config names no team
    assert not decide_pr_run(TrustSettings(), pr("CONTRIBUTOR"), set(), UserFacts(team_member=True)).run


def test_trust_settings_come_from_the_repository_config() -> None:
    config = parse_repo_config("trust:\n  users: [alice]\n  teams: [acme/gpu]\n  permission_check: false\n")
    assert decide_pr_run(config.trust, pr("NONE", author="alice"), set()).run
    assert needs_lookup(config.trust, "bob", "NONE") == Lookup(login="bob", teams=["acme/gpu"])


# --- Permission lookups ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("association", "expected"),
    [
        ("OWNER", Lookup(login="u")),
        ("MEMBER", Lookup(login="u")),
        ("COLLABORATOR", Lookup(login="u")),
        ("collaborator", Lookup(login="u")),
        ("CONTRIBUTOR", Lookup(login="u", permission=True)),
        ("FIRST_TIME_CONTRIBUTOR", Lookup(login="u", permission=True)),
        ("NONE", Lookup(login="u", permission=True)),
    ],
)
def test_lookup_only_when_the_association_does_not_decide(association: str, expected: Lookup) -> None:
    assert needs_lookup(TrustSettings(), "u", association) == expected


def test_no_lookup_when_permission_check_is_off_and_no_teams() -> None:
    settings = TrustSettings(permission_check=False)
    assert not needs_lookup(settings, "u", "NONE").needed


@pytest.mark.parametrize(
    ("permission", "run"),
    [
        ("admin", True),
        ("maintain", True),
        ("write", True),
        ("WRITE", True),
        ("triage", False),
        ("read", False),
        ("none", False),
        (None, False),
    ],
)
def test_permission_decides_an_ambiguous_author(permission: str | None, run: bool) -> None:
    decision = decide_pr_run(TrustSettings(), pr("CONTRIBUTOR"), set(), UserFacts(permission=permission))
    assert decision.run is run
    if permission is not None and run:
        assert f"{permission.lower()} permission" in decision.reason


def test_permission_is_ignored_when_the_check_is_off() -> None:
    settings = TrustSettings(permission_check=False)
    assert not decide_pr_run(settings, pr("CONTRIBUTOR"), set(), UserFacts(permission="admin")).run


def test_commenter_with_write_permission_approves() -> None:
    writer = Commenter(login="writer", association="CONTRIBUTOR")
    decision = decide_comment(TrustSettings(), pr("NONE"), writer, set(), UserFacts(permission="write"))
    assert decision.run and decision.approve_sha == HEAD
    denied = decide_comment(TrustSettings(), pr("NONE"), writer, set(), UserFacts(permission="triage"))
    assert not denied.run and denied.approve_sha is None


def test_author_with_write_permission_runs_own_comment() -> None:
    author = Commenter(login=AUTHOR, association="CONTRIBUTOR")
    facts = UserFacts(permission="maintain")
    decision = decide_comment(TrustSettings(), pr("CONTRIBUTOR"), author, set(), facts)
    assert decision.run and decision.approve_sha is None  # the author's own lookup covers both


# --- Reasons and the note -------------------------------------------------------------------------


def test_untrusted_commenter_is_told_who_can_start_runs() -> None:
    decision = decide("MEMBER", True, "untrusted", "none")
    assert decision.reason.startswith(f"@{PASSERBY}")
    assert "collaborators" in decision.reason and "write access" in decision.reason


def test_who_can_approve_reflects_the_config() -> None:
    text = who_can_approve(TrustSettings(users=["alice"], teams=["acme/gpu"], permission_check=False))
    assert (
        text == "the repository owner, organisation members, collaborators, @alice or members of `acme/gpu`"
    )
    assert who_can_approve(TrustSettings(associations=[], permission_check=False)).startswith("nobody")


def test_untrusted_pr_note() -> None:
    settings = TrustSettings(users=["alice"])
    note = untrusted_pr_note(settings, pr("FIRST_TIME_CONTRIBUTOR", fork=True))
    assert HEAD[:7] in note and "@alice" in note
    assert "comment `/retest-gpu`" in note
    assert "only this commit" in note
    assert "from a fork" in note
    # the note is posted by the bot and quoted by people: it must never trigger a run itself
    assert parse_comment(note).command is None
    again = untrusted_pr_note(settings, pr("NONE"), approvals_for("older"))
    assert "earlier commit" in again


# --- Payloads ---------------------------------------------------------------------------------------


def _pull_request(head_repo: dict[str, Any] | None, base_repo: dict[str, Any]) -> PullRequest:
    return PullRequest.model_validate(
        {
            "number": 7,
            "user": {"login": "octo", "type": "User"},
            "author_association": "first_time_contributor",
            "head": {"sha": HEAD, "ref": "feature", "repo": head_repo},
            "base": {"sha": OLDER, "ref": "main", "repo": {"clone_url": "https://github.com/x", **base_repo}},
        }
    )


@pytest.mark.parametrize(
    ("head_repo", "base_repo", "fork"),
    [
        ({"id": 2, "full_name": "octo/lib"}, {"id": 1, "full_name": "acme/lib"}, True),
        ({"id": 1, "full_name": "acme/lib"}, {"id": 1, "full_name": "acme/lib"}, False),
        (None, {"id": 1, "full_name": "acme/lib"}, True),  # the fork was deleted
        ({"full_name": "Acme/Lib"}, {"full_name": "acme/lib"}, False),
        ({"full_name": "octo/lib"}, {"full_name": "acme/lib"}, True),
    ],
)
def test_pr_facts_from_payload(
    head_repo: dict[str, Any] | None, base_repo: dict[str, Any], fork: bool
) -> None:
    facts = pr_facts_from_payload(_pull_request(head_repo, base_repo))
    assert facts == PrFacts(
        author_login="octo", author_association="FIRST_TIME_CONTRIBUTOR", is_fork=fork, head_sha=HEAD
    )


def test_commenter_from_payload() -> None:
    comment = Comment.model_validate(
        {"id": 1, "user": {"login": "octo", "type": "User"}, "author_association": "MEMBER"}
    )
    assert commenter_from_payload(comment) == Commenter(login="octo", association="MEMBER")
    assert commenter_from_payload(comment, User(login="Octo")).association == "MEMBER"
    # someone else edited the comment: the comment's association says nothing about the editor
    edited = commenter_from_payload(comment, User(login="mallory", type="User"))
    assert edited == Commenter(login="mallory", association="NONE")
    bot = Comment.model_validate({"id": 2, "user": {"login": "paritybot[bot]", "type": "Bot"}})
    assert commenter_from_payload(bot).ignored
