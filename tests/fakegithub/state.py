"""What the fake GitHub remembers: repositories, pull requests, comments, check runs, requests."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# Repository roles and the permission GitHub reports for each (maintain and triage are roles
# on top of write and read).
ROLE_PERMISSION = {
    "admin": "admin",
    "maintain": "write",
    "write": "write",
    "triage": "read",
    "read": "read",
    "none": "none",
}


@dataclass
class Installation:
    id: int
    account: str
    account_type: str = "Organization"


@dataclass
class PullFile:
    """One entry of ``GET /pulls/{n}/files``."""

    filename: str
    status: str = "modified"  # added, removed, modified, renamed, copied, changed, unchanged
    additions: int = 1
    deletions: int = 0
    patch: str | None = None
    previous_filename: str | None = None
    sha: str = "bbcd538c8e72b8c175046e27cc8f907076331401"


@dataclass
class PullRequest:
    number: int
    title: str
    body: str | None
    author: str
    author_association: str
    head_sha: str
    head_ref: str
    base_ref: str
    base_sha: str
    head_repo: str | None  # full name; None when the fork was deleted
    draft: bool = False
    labels: list[str] = field(default_factory=list)
    state: str = "open"
    merged_at: datetime | None = None
    files: list[PullFile] = field(default_factory=list)
    id: int = 0
    created_at: datetime | None = None


@dataclass
class Repo:
    owner: str
    name: str
    id: int
    installation_id: int
    default_branch: str = "main"
    private: bool = False
    # ref (branch name or sha) -> path -> content
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)
    roles: dict[str, str] = field(default_factory=dict)
    pulls: dict[int, PullRequest] = field(default_factory=dict)
    clone_url: str | None = None  # e.g. file:// of a local bare repository the bot can fetch

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclass
class Reaction:
    id: int
    content: str
    user: str
    user_type: str
    created_at: datetime


@dataclass
class Comment:
    id: int
    repo: str  # full name
    issue_number: int
    body: str
    user: str
    user_type: str  # "User" or "Bot"
    author_association: str
    created_at: datetime
    updated_at: datetime
    reactions: list[Reaction] = field(default_factory=list)
    deleted: bool = False
    # Every body the comment had, oldest first (the fake's answer to "was it edited, and how").
    bodies: list[str] = field(default_factory=list)


@dataclass
class CheckRun:
    id: int
    repo: str
    head_sha: str
    name: str
    status: str
    conclusion: str | None
    started_at: datetime | None
    completed_at: datetime | None
    details_url: str | None = None
    external_id: str | None = None
    output: dict[str, Any] = field(default_factory=dict)  # title, summary, text, images
    annotations: list[dict[str, Any]] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)
    # The request bodies that made it, creation first, then each PATCH.
    updates: list[dict[str, Any]] = field(default_factory=list)
    # The check run as GitHub returned it after each of those requests.
    states: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Call:
    """One HTTP request the fake received."""

    method: str
    path: str
    query: dict[str, str]
    json: Any
    headers: dict[str, str]
    operation_id: str | None = None
    status: int = 0
    at: float = 0.0  # time.monotonic() when it arrived
    carried_out: bool = True  # False: an injected failure answered it before anything happened


@dataclass
class Violation:
    """A request GitHub's description (or GitHub itself) would refuse, or one the fake lacks."""

    kind: str  # "unknown-path", "method-not-allowed", "invalid-request", "unimplemented"
    method: str
    path: str
    operation_id: str | None
    errors: list[str]

    def __str__(self) -> str:
        op = f" ({self.operation_id})" if self.operation_id else ""
        return f"{self.kind}: {self.method} {self.path}{op}: " + "; ".join(self.errors)


@dataclass
class InjectedFailure:
    method: str
    path: str  # a concrete path or the description's template
    status: int
    remaining: int
    body: Any
    headers: dict[str, str]
    after: bool = False  # carry the request out, then answer with the failure (a lost answer)
