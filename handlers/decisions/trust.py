"""Who may run code on the GPU machines: pure decisions on pull-request and comment facts.

A GPU runner is a self-hosted machine, so running a stranger's pull request there is running a
stranger's code on our hardware. The rules:

* Code from a PR runs only if its author is trusted, or a trusted user approved THAT head commit.
  An approval covers one commit; a new push by an untrusted author needs a new approval (a label
  or a "this PR is ok" flag would let the author push anything after the first review).
* Trusted means: an author association the config trusts (OWNER, MEMBER, COLLABORATOR by
  default), a login in ``trust.users``, a member of a team in ``trust.teams``, or, with
  ``trust.permission_check`` on, write/maintain/admin permission on the repository.
* Forks are untrusted unless their author is trusted; a branch in the base repository gets no
  trust of its own either (the permission lookup settles whether its author may push there).
* A trusted user's ``/retest-gpu`` on an untrusted PR runs it and approves its head commit.
  An untrusted PR author may rerun an approved commit; anyone else untrusted may not start runs
  (GPU time is scarce, and reruns are the author's and the maintainers' call).
* Comments from bots are ignored: the bot must never trigger itself, and another app's comment
  may quote user text.

The caller does the I/O: it asks :func:`needs_lookup` which API calls would settle a case, makes
only those, and passes the answers in as :class:`UserFacts`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import Field, field_validator

from bot.core.config import TrustSettings
from bot.core.kinds import COMMAND
from bot.core.models import Model
from handlers.events import Comment, PullRequest, User

TRUSTED_PERMISSIONS = frozenset({"admin", "maintain", "write"})
_SHORT_SHA = 7

_ASSOCIATION_WORDS = {
    "OWNER": "the repository owner",
    "MEMBER": "organisation members",
    "COLLABORATOR": "collaborators",
    "CONTRIBUTOR": "previous contributors",
    "FIRST_TIME_CONTRIBUTOR": "first-time contributors",
    "FIRST_TIMER": "first-time GitHub users",
    "MANNEQUIN": "imported (mannequin) accounts",
    "NONE": "anyone",
}
_ASSOCIATION_ROLE = {
    "OWNER": "owns this repository",
    "MEMBER": "is an organisation member",
    "COLLABORATOR": "is a collaborator",
}


def is_bot_login(login: str) -> bool:
    """GitHub Apps comment as ``name[bot]``."""
    return login.lower().endswith("[bot]")


def _same_login(a: str, b: str) -> bool:
    return a.casefold() == b.casefold()  # GitHub logins are case-insensitive


def _short(sha: str) -> str:
    return sha[:_SHORT_SHA]


class PrFacts(Model):
    """What the trust rules need to know about a pull request."""

    author_login: str
    author_association: str = Field("NONE", description="pull_request.author_association")
    author_is_bot: bool = False
    is_fork: bool = Field(description="head repository differs from the base, or is gone")
    head_sha: str

    @field_validator("author_association", mode="before")
    @classmethod
    def _upper_association(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


class Commenter(Model):
    """Who wrote (or, for an edit, changed) a ``/retest-gpu`` comment."""

    login: str
    association: str = Field("NONE", description="comment.author_association; NONE when unknown")
    is_bot: bool = False

    @field_validator("association", mode="before")
    @classmethod
    def _upper_association(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @property
    def ignored(self) -> bool:
        return self.is_bot or is_bot_login(self.login)


class Approval(Model):
    """A trusted user asked for a run of this exact head commit."""

    model_config = Model.model_config | {"frozen": True}

    sha: str
    approver: str


class UserFacts(Model):
    """Answers the caller fetched because :func:`needs_lookup` asked for them; None = not asked."""

    permission: str | None = Field(
        None, description="admin/maintain/write/triage/read/none from the collaborator-permission API"
    )
    team_member: bool | None = Field(None, description="active member of any team in trust.teams")


class Lookup(Model):
    """The API calls that would settle whether ``login`` is trusted (none when already decided)."""

    login: str
    permission: bool = Field(False, description="GET /repos/{repo}/collaborators/{login}/permission")
    teams: list[str] = Field(
        default_factory=list,
        description="org/team slugs: GET /orgs/{org}/teams/{slug}/memberships/{login}; one active is enough",
    )

    @property
    def needed(self) -> bool:
        return self.permission or bool(self.teams)


class TrustDecision(Model):
    run: bool
    reason: str = Field(description="one or two sentences for the user")
    needs_approval: bool = Field(False, description="the PR's head commit waits for a maintainer's approval")
    approve_sha: str | None = Field(None, description="record this head SHA as approved by the commenter")
    ignored: bool = Field(False, description="a bot's comment: do nothing and say nothing")
    author_trusted: bool = Field(
        False,
        description="the PR's author is trusted (not merely this commit approved); only such code "
        "may run on a host runner",
    )


# --- Payload parsing --------------------------------------------------------------------------------


def pr_facts_from_payload(pull: PullRequest) -> PrFacts:
    """Build :class:`PrFacts` from a webhook's or the REST API's pull request."""
    head_repo, base_repo = pull.head.repo, pull.base.repo
    # head.repo is null when the fork was deleted: the code's origin can no longer be known.
    if head_repo is None:
        is_fork = True
    elif head_repo.id is not None and base_repo.id is not None:
        is_fork = head_repo.id != base_repo.id
    else:
        is_fork = head_repo.full_name.lower() != base_repo.full_name.lower()
    return PrFacts(
        author_login=pull.user.login if pull.user is not None else "",
        author_association=pull.author_association,
        author_is_bot=pull.user is not None and pull.user.type == "Bot",
        is_fork=is_fork,
        head_sha=pull.head.sha,
    )


def commenter_from_payload(comment: Comment, sender: User | None = None) -> Commenter:
    """Build :class:`Commenter` from an ``issue_comment`` payload's ``comment`` (and ``sender``).

    For an edit, the ``sender`` is whoever edited; when that is not the comment's author, the
    comment's association says nothing about them, so it becomes NONE and the lookups decide.
    """
    login = comment.user.login if comment.user is not None else ""
    association = comment.author_association
    is_bot = comment.user is not None and comment.user.type == "Bot"
    if sender is not None and not _same_login(sender.login, login):
        login, association, is_bot = sender.login, "NONE", sender.type == "Bot"
    return Commenter(login=login, association=association, is_bot=is_bot)


# --- Trust of one user ------------------------------------------------------------------------------


def _trusted_without_lookup(settings: TrustSettings, login: str, association: str) -> str | None:
    """Why ``login`` is trusted from the webhook alone, or None."""
    if any(_same_login(login, user) for user in settings.users):
        return "is listed as trusted in this repository's config"
    if association in settings.associations:
        return _ASSOCIATION_ROLE.get(association, f"has association {association}, which the config trusts")
    return None


def _trusted_by_facts(settings: TrustSettings, facts: UserFacts | None) -> str | None:
    if facts is None:
        return None
    permission = (facts.permission or "").lower()
    if settings.permission_check and permission in TRUSTED_PERMISSIONS:
        return f"has {permission} permission on this repository"
    if settings.teams and facts.team_member:
        return "is a member of a trusted team"
    return None


def trusted_because(
    settings: TrustSettings, login: str, association: str, facts: UserFacts | None = None
) -> str | None:
    """Why ``login`` is trusted (a phrase such as "is a collaborator"), or None if not."""
    return _trusted_without_lookup(settings, login, association.upper()) or _trusted_by_facts(settings, facts)


def needs_lookup(settings: TrustSettings, login: str, association: str, *, is_bot: bool = False) -> Lookup:
    """The API calls that would decide whether ``login`` is trusted; none if the webhook decides.

    Bots get no lookup: apps have no collaborator permission or team membership to ask about
    (trust one by naming it in ``trust.users``).
    """
    if is_bot or is_bot_login(login) or _trusted_without_lookup(settings, login, association.upper()):
        return Lookup(login=login)
    return Lookup(login=login, permission=settings.permission_check, teams=list(settings.teams))


def who_can_approve(settings: TrustSettings) -> str:
    """The people whose ``/retest-gpu`` approves a commit, in words."""
    parts = [_ASSOCIATION_WORDS.get(a, a.lower()) for a in settings.associations]
    if settings.permission_check:
        parts.append("anyone with write access")
    parts += [f"@{user}" for user in settings.users]
    parts += [f"members of `{team}`" for team in settings.teams]
    if not parts:
        return "nobody (the config trusts no one)"
    if len(parts) == 1:
        return parts[0]
    return ", ".join(parts[:-1]) + " or " + parts[-1]


# --- Decisions ----------------------------------------------------------------------------------------


def _approval_of(approvals: Iterable[Approval], sha: str) -> Approval | None:
    matching = sorted((a for a in approvals if a.sha.lower() == sha.lower()), key=lambda a: a.approver)
    return matching[0] if matching else None


def _author_trust(settings: TrustSettings, pr: PrFacts, facts: UserFacts | None) -> str | None:
    return trusted_because(settings, pr.author_login, pr.author_association, facts)


def _waiting_reason(settings: TrustSettings, pr: PrFacts, approvals: Iterable[Approval]) -> str:
    origin = " from a fork" if pr.is_fork else ""
    earlier = any(a.sha.lower() != pr.head_sha.lower() for a in approvals)
    first = (
        f"An earlier commit of this pull request{origin} was approved, but an approval covers one "
        "commit and new commits were pushed since."
        if earlier
        else f"@{pr.author_login} is not yet trusted to run code{origin} on the GPU machines."
    )
    return (
        f"{first} To approve commit `{_short(pr.head_sha)}`, {who_can_approve(settings)} "
        f"can comment `{COMMAND}`."
    )


def decide_pr_run(
    settings: TrustSettings,
    pr: PrFacts,
    approvals: Iterable[Approval],
    facts: UserFacts | None = None,
) -> TrustDecision:
    """May the PR's head commit run on a GPU machine now (on opened / synchronize / reopened)?

    ``facts`` are the author's looked-up permission and team membership.
    """
    approvals = list(approvals)
    why = _author_trust(settings, pr, facts)
    if why is not None:
        return TrustDecision(run=True, reason=f"@{pr.author_login} {why}.", author_trusted=True)
    approval = _approval_of(approvals, pr.head_sha)
    if approval is not None:
        return TrustDecision(
            run=True, reason=f"Commit `{_short(pr.head_sha)}` was approved by @{approval.approver}."
        )
    return TrustDecision(run=False, needs_approval=True, reason=_waiting_reason(settings, pr, approvals))


def decide_comment(
    settings: TrustSettings,
    pr: PrFacts,
    commenter: Commenter,
    approvals: Iterable[Approval],
    facts: UserFacts | None = None,
    author_facts: UserFacts | None = None,
) -> TrustDecision:
    """May this ``/retest-gpu`` comment start a run of the PR's head commit?

    ``facts`` are the commenter's looked-up permission and team membership; ``author_facts`` the
    author's, if known (when the commenter is the author, ``facts`` serve for both). Unknown
    author facts only mean a trusted commenter's run also records an approval, which is harmless.
    """
    approvals = list(approvals)
    if commenter.ignored:
        return TrustDecision(run=False, ignored=True, reason="Comments from bots are ignored.")
    is_author = _same_login(commenter.login, pr.author_login)
    if is_author and author_facts is None:
        author_facts = facts
    author_trusted = _author_trust(settings, pr, author_facts) is not None
    head_runnable = author_trusted or _approval_of(approvals, pr.head_sha) is not None
    why = trusted_because(settings, commenter.login, commenter.association, facts)
    if why is not None:
        if author_trusted:
            return TrustDecision(run=True, reason=f"@{commenter.login} {why}.", author_trusted=True)
        return TrustDecision(
            run=True,
            approve_sha=pr.head_sha,
            reason=f"@{commenter.login} {why}; this approves commit `{_short(pr.head_sha)}` for the GPU "
            "machines.",
        )
    if is_author:
        if head_runnable:
            return TrustDecision(
                run=True,
                reason=f"Commit `{_short(pr.head_sha)}` is approved for the GPU machines.",
                author_trusted=author_trusted,
            )
        return TrustDecision(run=False, needs_approval=True, reason=_waiting_reason(settings, pr, approvals))
    return TrustDecision(
        run=False,
        needs_approval=not head_runnable,
        reason=f"@{commenter.login}, only the author of this pull request (on an approved commit) and "
        f"{who_can_approve(settings)} can start GPU runs here.",
    )


def untrusted_pr_note(settings: TrustSettings, pr: PrFacts, approvals: Iterable[Approval] = ()) -> str:
    """The note posted on a PR whose head commit waits for approval."""
    return "\n\n".join(
        [
            "Thanks for the pull request! Its tests run on self-hosted GPU machines, so a "
            "maintainer has to look at the code before it runs there.",
            _waiting_reason(settings, pr, approvals),
            "An approval covers only this commit: after a new push, the new commit needs approving again.",
        ]
    )
