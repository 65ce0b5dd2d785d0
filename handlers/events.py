"""What handlers read of GitHub's webhook payloads (and of a pull request from GitHub's API), typed
and bounded where it enters.

Each model names only the fields a handler uses; every other key is ignored. Values must have
GitHub's shapes (``owner/name``, a 40-hex SHA, a positive number, a branch name git would accept,
text within GitHub's own size limits), so nothing from a payload reaches a URL, a log line, a git
command or the store unchecked. A payload that does not fit raises :class:`MalformedPayload`,
whose message is one line naming the field: the dispatcher records the delivery as failed with it
and does not retry, since the same bytes would fail the same way.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

BODY_MAX = 65_536  # GitHub refuses longer issue, pull request and comment bodies
LABELS_MAX = 100  # GitHub's cap on labels per issue or pull request
LINKED_PULLS_MAX = 100  # check_run.pull_requests: a check run's head SHA is in a few PRs at most


class MalformedPayload(ValueError):
    """A payload without the shape a handler reads; the message names the field, in one line."""


def _git_ref(name: str) -> str:
    """A branch name as ``git check-ref-format --branch`` accepts it (it also never looks like an
    option on a git command line)."""
    if (
        name.startswith(("-", "/", "."))
        or name.endswith(("/", ".", ".lock"))
        or ".." in name
        or "//" in name
        or "/." in name
        or "@{" in name
        or name == "@"
        or re.search(r"[\x00-\x20\x7f~^:?*\[\\]", name)
    ):
        raise ValueError("not a git branch name")
    return name


def _repo_name(full_name: str) -> str:
    if full_name.split("/", 1)[1] in (".", ".."):
        raise ValueError("not a repository name")
    return full_name


def _upper(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


def _text(max_length: int, pattern: str | None = None) -> Any:
    return Field(strict=True, min_length=1, max_length=max_length, pattern=pattern)


# GitHub's shapes. Numbers are JSON integers (not floats, strings or booleans) that SQLite keeps.
Id = Annotated[int, Field(strict=True, ge=1, lt=2**63)]
Sha = Annotated[str, _text(64, r"^[0-9a-f]{40}([0-9a-f]{24})?$")]
RepoName = Annotated[
    str, _text(140, r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,38}/[A-Za-z0-9_.-]{1,100}$"), AfterValidator(_repo_name)
]
GitRef = Annotated[str, _text(255), AfterValidator(_git_ref)]
Login = Annotated[str, _text(45, r"^[A-Za-z0-9_-]{1,39}(\[bot\])?$")]
Association = Annotated[str, BeforeValidator(_upper), _text(32, r"^[A-Z_]+$")]
Action = Annotated[str, _text(64, r"^[a-z_]+$")]
Word = Annotated[str, _text(64, r"^[A-Za-z0-9_.-]+$")]  # a user's type, a PR's state, an app's slug
LabelName = Annotated[str, _text(100, r"^[^\x00-\x1f\x7f]+$")]
CloneUrl = Annotated[str, _text(2048, r"^(https?|file)://[^\x00-\x20\x7f]+$")]
Body = Annotated[str, Field(strict=True, max_length=BODY_MAX)]
Flag = Annotated[bool, Field(strict=True)]


class Fields(BaseModel):
    """Only the fields a handler reads; GitHub adds keys all the time, and they are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


# --- pieces ----------------------------------------------------------------------------------------


class Installation(Fields):
    id: Id


class Repository(Fields):
    full_name: RepoName


class User(Fields):
    login: Login
    type: Word = "User"


class Label(Fields):
    name: LabelName


class HeadRepo(Fields):
    id: Id | None = None
    full_name: RepoName


class BaseRepo(HeadRepo):
    clone_url: CloneUrl
    private: Flag | None = None  # whose runs the run page shows to anyone (docs/run-page.md)


class Head(Fields):
    sha: Sha
    ref: GitRef
    repo: HeadRepo | None  # null when the fork was deleted


class Base(Fields):
    sha: Sha
    ref: GitRef
    repo: BaseRepo


class PullRequest(Fields):
    """A pull request as a webhook or ``GET /repos/{owner}/{repo}/pulls/{number}`` shows it."""

    number: Id
    state: Word | None = None
    draft: Flag = False
    user: User | None = None
    author_association: Association = "NONE"
    head: Head
    base: Base
    body: Body | None = None
    labels: list[Label] = Field(default_factory=list, max_length=LABELS_MAX)


class PullNumber(Fields):
    number: Id
    state: Word | None = None


# --- what the dispatcher reads of every delivery ---------------------------------------------------


class Envelope(Fields):
    """The route (action), the client (installation) and the log context (repository)."""

    action: Action | None = None
    installation: Installation | None = None
    repository: Repository | None = None


# --- one model per handler -------------------------------------------------------------------------


class PullRequestEvent(Fields):
    action: Action
    pull_request: PullRequest


class PullRequestStopped(Fields):
    pull_request: PullNumber
    repository: Repository


class Issue(Fields):
    number: Id
    pull_request: Fields | None = None  # present on a pull request's conversation


class Comment(Fields):
    id: Id
    body: Body | None = None
    user: User | None = None
    author_association: Association = "NONE"


class BodyChange(Fields):
    old: Body | None = Field(None, alias="from")


class Changes(Fields):
    body: BodyChange | None = None


class IssueCommentEvent(Fields):
    action: Action
    issue: Issue
    comment: Comment
    changes: Changes | None = None
    sender: User | None = None
    repository: Repository

    @property
    def body_before_edit(self) -> str | None:
        """The comment's body before this edit; None for a new comment."""
        if self.action != "edited" or self.changes is None or self.changes.body is None:
            return None
        return self.changes.body.old


class App(Fields):
    slug: Word | None = None


class CheckRun(Fields):
    head_sha: Sha
    app: App | None = None
    pull_requests: list[PullNumber] = Field(default_factory=list, max_length=LINKED_PULLS_MAX)


class CheckRunEvent(Fields):
    check_run: CheckRun
    repository: Repository


class PushedRepository(Repository):
    default_branch: GitRef | None = None
    clone_url: CloneUrl
    private: Flag | None = None


class PushEvent(Fields):
    ref: Annotated[str, _text(300)]
    after: Sha | None = None
    deleted: Flag = False
    repository: PushedRepository


class Account(Fields):
    login: Login | None = None  # an enterprise account has a slug instead


class InstalledApp(Installation):
    account: Account | None = None


class InstallationEvent(Fields):
    action: Action | None = None
    installation: InstalledApp


# --- parsing ---------------------------------------------------------------------------------------

M = TypeVar("M", bound=Fields)

_JSON_TYPES = {
    "NoneType": "null",
    "bool": "a boolean",
    "int": "an integer",
    "float": "a number with a fraction or an exponent",
    "str": "a string",
    "list": "an array",
    "dict": "an object",
}


def parse(model: type[M], data: object) -> M:
    """``data`` as ``model``; MalformedPayload naming the first field that does not fit."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise MalformedPayload(describe(exc)) from None


def read_body(body: bytes) -> dict[str, Any]:
    """A delivery's JSON object. The intake parsed it once already; this can still fail where it
    runs with less stack to recurse into than the intake had."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise MalformedPayload(
            f"malformed payload: not JSON the dispatcher can read ({type(exc).__name__})"
        ) from None
    if not isinstance(data, dict):
        raise MalformedPayload("malformed payload: not a JSON object")
    return data


def describe(exc: ValidationError) -> str:
    """One line: the first field, what is wrong with it, and what JSON type came instead.

    Made from the models' own field names and pydantic's messages, never from the payload's
    text, so the line is as short and as safe to log as the models are.
    """
    errors = exc.errors(include_url=False, include_context=False, include_input=True)
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "<payload>"
    got = (
        ""
        if first["type"] == "missing"
        else f" (got {_JSON_TYPES.get(type(first['input']).__name__, 'a value')})"
    )
    more = f"; {len(errors) - 1} more" if len(errors) > 1 else ""
    return f"malformed payload: {where}: {first['msg']}{got}{more}"
