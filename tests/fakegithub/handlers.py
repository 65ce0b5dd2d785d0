"""One function per REST operation the fake implements, keyed by GitHub's operationId."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from aiohttp import web

from . import auth, render
from .state import ROLE_PERMISSION, CheckRun, Comment, PullRequest, Reaction, Repo

if TYPE_CHECKING:
    from .server import FakeGitHub

DOCS = "https://docs.github.com/rest"
_SHA = re.compile(r"^[0-9a-f]{40}$")


class GitHubError(Exception):
    """An error answer the way GitHub words it. ``refusal``: GitHub refuses a request a correct
    client would never send, so the fake records it as a violation too."""

    def __init__(self, status: int, message: str, *, refusal: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.refusal = refusal


def not_found() -> GitHubError:
    return GitHubError(404, "Not Found")


@dataclass
class Ctx:
    fake: FakeGitHub
    request: web.Request
    params: dict[str, str]
    query: dict[str, str]
    body: Any
    installation_id: int | None
    token_repos: frozenset[str] | None
    token_permissions: dict[str, str] | None = None
    user_login: str | None = None  # a viewer's token (the App's user authorization)

    @property
    def site(self) -> render.Site:
        return self.fake.site

    def repo(self) -> Repo:
        repo = self.fake.find_repo(f"{self.params['owner']}/{self.params['repo']}")
        # GitHub answers 404, not 403, for a repository the token cannot see.
        if repo is None or repo.installation_id != self.installation_id:
            raise not_found()
        if self.token_repos is not None and repo.name.lower() not in self.token_repos:
            raise not_found()
        return repo

    def pull(self, repo: Repo, number: str) -> PullRequest:
        pr = repo.pulls.get(int(number))
        if pr is None:
            raise not_found()
        return pr

    def comment(self, repo: Repo) -> Comment:
        found = self.fake.live_comment(int(self.params["comment_id"]))
        if found is None or found.repo.lower() != repo.full_name.lower():
            raise not_found()
        return found

    def check_run(self, repo: Repo) -> CheckRun:
        run = self.fake.runs.get(int(self.params["check_run_id"]))
        if run is None or run.repo.lower() != repo.full_name.lower():
            raise not_found()
        return run


def respond(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status,
        body=b"" if status == 204 else json.dumps(data).encode(),
        content_type="application/json",
        charset="utf-8",
        headers=headers,
    )


def paginate(ctx: Ctx, items: list[Any], wrap: str | None = None) -> web.Response:
    """One page of ``items`` with GitHub's Link header (first/prev/next/last)."""
    per_page = int(ctx.query.get("per_page", "30"))
    page = int(ctx.query.get("page", "1"))
    last = max(1, -(-len(items) // per_page))
    chunk = items[(page - 1) * per_page : page * per_page]
    base = f"{ctx.fake.url}{ctx.request.path}"

    def link(number: int, rel: str) -> str:
        return f'<{base}?{urlencode({**ctx.query, "per_page": per_page, "page": number})}>; rel="{rel}"'

    rels = []
    if page > 1:
        rels += [link(page - 1, "prev"), link(1, "first")]
    if page < last:
        rels += [link(page + 1, "next"), link(last, "last")]
    headers = {"Link": ", ".join(rels)} if rels else None
    data: Any = {"total_count": len(items), wrap: chunk} if wrap else chunk
    return respond(data, headers=headers)


# --- app ------------------------------------------------------------------------------------


async def get_app(ctx: Ctx) -> web.Response:
    return respond(render.app(ctx.site))


async def create_installation_token(ctx: Ctx) -> web.Response:
    inst = ctx.fake.installations.get(int(ctx.params["installation_id"]))
    if inst is None:
        raise not_found()
    body = ctx.body or {}
    names = body.get("repositories")
    granted = render.app(ctx.site)["permissions"]
    asked = body.get("permissions")
    if names is not None:
        theirs = {r.name.lower() for r in ctx.fake.repos.values() if r.installation_id == inst.id}
        if any(name.lower() not in theirs for name in names):
            raise GitHubError(
                422,
                "There is at least one repository that does not exist or is not accessible to the "
                "parent installation.",
            )
    if asked is not None and not all(auth.grants(granted, name, level) for name, level in asked.items()):
        raise GitHubError(422, "The permissions requested are not granted to this installation.")
    token = ctx.fake.issue_token(inst.id, repositories=names, permissions=asked)
    data = {
        "token": token.token,
        "expires_at": render.iso(token.expires_at),
        "permissions": asked if asked is not None else granted,
        "repository_selection": "selected" if names else "all",
    }
    return respond(data, 201)


async def get_repo_installation(ctx: Ctx) -> web.Response:
    repo = ctx.fake.find_repo(f"{ctx.params['owner']}/{ctx.params['repo']}")
    if repo is None:
        raise not_found()
    return respond(render.installation(ctx.site, ctx.fake.installations[repo.installation_id]))


async def list_installations(ctx: Ctx) -> web.Response:
    items = [render.installation(ctx.site, i) for i in ctx.fake.installations.values()]
    return paginate(ctx, items)


# --- pull requests and contents -------------------------------------------------------------


async def get_pull(ctx: Ctx) -> web.Response:
    repo = ctx.repo()
    pr = ctx.pull(repo, ctx.params["pull_number"])
    return respond(render.pull_request(ctx.site, repo, pr, ctx.fake.now()))


async def list_pull_files(ctx: Ctx) -> web.Response:
    repo = ctx.repo()
    pr = ctx.pull(repo, ctx.params["pull_number"])
    return paginate(ctx, [render.pull_file(ctx.site, repo, pr, f) for f in pr.files])


async def pulls_for_commit(ctx: Ctx) -> web.Response:
    repo = ctx.repo()
    sha = ctx.params["commit_sha"]
    now = ctx.fake.now()
    pulls = [
        render.pull_request_simple(ctx.site, repo, pr, now)
        for pr in repo.pulls.values()
        if pr.head_sha == sha
    ]
    return paginate(ctx, pulls)


async def get_content(ctx: Ctx) -> web.Response:
    repo = ctx.repo()
    ref = ctx.query.get("ref") or repo.default_branch
    path = ctx.params["path"].strip("/")
    tree = repo.files.get(ref, {})
    if path in tree:
        if ".raw" in ctx.request.headers.get("Accept", ""):
            # The raw media type (application/vnd.github.raw[+json]) answers with the bytes themselves.
            return web.Response(body=tree[path], content_type="text/plain", charset="utf-8")
        return respond(render.content_file(ctx.site, repo, path, ref, tree[path]))
    children = sorted({p[len(path) + 1 :].split("/", 1)[0] for p in tree if p.startswith(path + "/")})
    if not children:
        raise not_found()
    entries = []
    for child in children:
        full = f"{path}/{child}"
        entries.append(render.content_entry(ctx.site, repo, full, ref, full not in tree, tree.get(full, b"")))
    return respond(entries)


# --- comments and reactions -----------------------------------------------------------------


async def list_comments(ctx: Ctx) -> web.Response:
    repo = ctx.repo()
    ctx.pull(repo, ctx.params["issue_number"])
    comments = ctx.fake.comments(repo.full_name, int(ctx.params["issue_number"]))
    return paginate(ctx, [render.issue_comment(ctx.site, c, on_pull=True) for c in comments])


async def create_comment(ctx: Ctx) -> web.Response:
    repo = ctx.repo()
    pr = ctx.pull(repo, ctx.params["issue_number"])
    bot = ctx.fake.bot_login
    comment = ctx.fake.add_comment(
        repo.full_name, pr.number, ctx.body["body"], user=bot, author_association="NONE", user_type="Bot"
    )
    return respond(
        render.issue_comment(ctx.site, comment, on_pull=True),
        201,
        {"Location": f"{ctx.fake.url}/repos/{repo.full_name}/issues/comments/{comment.id}"},
    )


async def get_comment(ctx: Ctx) -> web.Response:
    comment = ctx.comment(ctx.repo())
    return respond(render.issue_comment(ctx.site, comment, on_pull=True))


async def update_comment(ctx: Ctx) -> web.Response:
    comment = ctx.comment(ctx.repo())
    comment.body = ctx.body["body"]
    comment.bodies.append(comment.body)
    comment.updated_at = ctx.fake.now()
    return respond(render.issue_comment(ctx.site, comment, on_pull=True))


async def delete_comment(ctx: Ctx) -> web.Response:
    ctx.comment(ctx.repo()).deleted = True
    return respond(None, 204)


async def create_reaction(ctx: Ctx) -> web.Response:
    comment = ctx.comment(ctx.repo())
    content, bot = ctx.body["content"], ctx.fake.bot_login
    for existing in comment.reactions:
        if existing.content == content and existing.user == bot:
            return respond(render.reaction(ctx.site, existing), 200)
    reaction = Reaction(ctx.fake.next_id("reaction"), content, bot, "Bot", ctx.fake.now())
    comment.reactions.append(reaction)
    return respond(render.reaction(ctx.site, reaction), 201)


async def list_reactions(ctx: Ctx) -> web.Response:
    comment = ctx.comment(ctx.repo())
    wanted = ctx.query.get("content")
    items = [render.reaction(ctx.site, r) for r in comment.reactions if wanted in (None, r.content)]
    return paginate(ctx, items)


# --- check runs -----------------------------------------------------------------------------


def _render_run(ctx: Ctx, run: CheckRun) -> dict[str, Any]:
    repo = ctx.fake.find_repo(run.repo)
    assert repo is not None
    # Like GitHub, only pull requests whose head lives in this repository are listed (not forks).
    pulls = [
        (repo, pr)
        for pr in repo.pulls.values()
        if pr.head_sha == run.head_sha and (pr.head_repo or "").lower() == repo.full_name.lower()
    ]
    return render.check_run(ctx.site, run, pulls)


def _apply_run_body(ctx: Ctx, run: CheckRun, body: dict[str, Any]) -> None:
    """Fold one create/update body into the run the way GitHub does."""
    now = ctx.fake.now()
    for key in ("name", "details_url", "external_id"):
        if key in body:
            setattr(run, key, body[key])
    if "started_at" in body:
        run.started_at = ctx.fake.parse_time(body["started_at"])
    if "status" in body:
        run.status = body["status"]
    if body.get("conclusion") is not None:
        # Providing a conclusion completes the run, whatever status says.
        run.conclusion = body["conclusion"]
        run.status = "completed"
    if run.status == "completed" and run.completed_at is None:
        run.completed_at = ctx.fake.parse_time(body["completed_at"]) if "completed_at" in body else now
    if "output" in body:
        output = body["output"]
        for key in ("title", "summary", "text", "images"):
            if key in output:
                run.output[key] = output[key]
        # Annotations accumulate: each update appends to what earlier requests sent.
        run.annotations.extend(output.get("annotations", []))
    if "actions" in body:
        run.actions = body["actions"]
    run.updates.append(body)
    run.states.append(_render_run(ctx, run))


async def create_check_run(ctx: Ctx) -> web.Response:
    repo = ctx.repo()
    if not _SHA.match(ctx.body["head_sha"]):
        raise GitHubError(422, f"No commit found for SHA: {ctx.body['head_sha']}", refusal=True)
    run = CheckRun(
        id=ctx.fake.next_id("check_run"),
        repo=repo.full_name,
        head_sha=ctx.body["head_sha"],
        name=ctx.body["name"],
        status="queued",
        conclusion=None,
        started_at=ctx.fake.now(),
        completed_at=None,
    )
    ctx.fake.runs[run.id] = run
    _apply_run_body(ctx, run, ctx.body)
    return respond(run.states[-1], 201)


async def update_check_run(ctx: Ctx) -> web.Response:
    run = ctx.check_run(ctx.repo())
    _apply_run_body(ctx, run, ctx.body)
    return respond(run.states[-1])


async def get_check_run(ctx: Ctx) -> web.Response:
    return respond(_render_run(ctx, ctx.check_run(ctx.repo())))


async def list_annotations(ctx: Ctx) -> web.Response:
    run = ctx.check_run(ctx.repo())
    return paginate(ctx, [render.annotation(ctx.site, run, a) for a in run.annotations])


async def list_check_runs_for_ref(ctx: Ctx) -> web.Response:
    repo = ctx.repo()
    ref = ctx.params["ref"]
    branch_heads = {pr.head_ref: pr.head_sha for pr in repo.pulls.values()}
    sha = ref if _SHA.match(ref) else branch_heads.get(ref.removeprefix("heads/"), ref)
    runs = [r for r in ctx.fake.check_runs(repo.full_name, head_sha=sha)]
    if "check_name" in ctx.query:
        runs = [r for r in runs if r.name == ctx.query["check_name"]]
    if "status" in ctx.query:
        runs = [r for r in runs if r.status == ctx.query["status"]]
    if "app_id" in ctx.query and int(ctx.query["app_id"]) != ctx.fake.app_id:
        runs = []  # every check run here was made by the fake's one App
    if ctx.query.get("filter", "latest") == "latest":
        latest: dict[str, CheckRun] = {}
        for r in runs:
            latest[r.name] = r
        runs = list(latest.values())
    runs.sort(key=lambda r: r.id, reverse=True)
    return paginate(ctx, [_render_run(ctx, r) for r in runs], wrap="check_runs")


# --- people ---------------------------------------------------------------------------------


async def collaborator_permission(ctx: Ctx) -> web.Response:
    repo = ctx.repo()
    login = ctx.params["username"]
    role = repo.roles.get(login.lower())
    if role is None:
        # A non-collaborator can read a public repository and nothing of a private one.
        role = "none" if repo.private else "read"
    person = render.user(ctx.site, login)
    person["role_name"] = role
    data = {"permission": ROLE_PERMISSION[role], "role_name": role, "user": person}
    return respond(data)


async def team_membership(ctx: Ctx) -> web.Response:
    org, slug, login = ctx.params["org"], ctx.params["team_slug"], ctx.params["username"]
    member = ctx.fake.teams.get((org.lower(), slug.lower()), {}).get(login.lower())
    if member is None:
        raise not_found()
    role, state = member
    team_id = render.stable_id(f"{org}/{slug}")
    url = f"{ctx.fake.url}/teams/{team_id}/memberships/{login}"
    return respond({"url": url, "role": role, "state": state})


Handler = Callable[[Ctx], Awaitable[web.Response]]

HANDLERS: dict[str, Handler] = {
    "apps/get-authenticated": get_app,
    "apps/create-installation-access-token": create_installation_token,
    "apps/get-repo-installation": get_repo_installation,
    "apps/list-installations": list_installations,
    "pulls/get": get_pull,
    "pulls/list-files": list_pull_files,
    "repos/list-pull-requests-associated-with-commit": pulls_for_commit,
    "repos/get-content": get_content,
    "issues/list-comments": list_comments,
    "issues/create-comment": create_comment,
    "issues/get-comment": get_comment,
    "issues/update-comment": update_comment,
    "issues/delete-comment": delete_comment,
    "reactions/create-for-issue-comment": create_reaction,
    "reactions/list-for-issue-comment": list_reactions,
    "checks/create": create_check_run,
    "checks/update": update_check_run,
    "checks/get": get_check_run,
    "checks/list-annotations": list_annotations,
    "checks/list-for-ref": list_check_runs_for_ref,
    "repos/get-collaborator-permission-level": collaborator_permission,
    "teams/get-membership-for-user-in-org": team_membership,
}

# Operations GitHub authenticates with the app's JWT rather than an installation token.
JWT_OPERATIONS = frozenset(
    {
        "apps/get-authenticated",
        "apps/create-installation-access-token",
        "apps/get-repo-installation",
        "apps/list-installations",
    }
)
