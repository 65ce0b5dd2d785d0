"""JSON the way GitHub sends it, built from GitHub's own response examples in its REST description.

Each shape starts as a deep copy of the description's example (so every field a client may read is
there) and then takes the fake's values; URLs are rewritten to point at the fake's API.
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import zlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .spec import rest_spec
from .state import CheckRun, Comment, Installation, PullFile, PullRequest, Reaction, Repo

GITHUB_API = "https://api.github.com"
HTML = "https://github.com"
_REACTION_KEYS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "eyes", "rocket")


@dataclass(frozen=True)
class Site:
    """Where the fake lives, and the app it serves."""

    api: str
    app_id: int
    app_slug: str
    app_name: str
    app_owner: str


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def stable_id(text: str) -> int:
    """A positive id that is the same for the same name in every run."""
    return zlib.crc32(text.encode()) % 90_000_000 + 10_000_000


def node_id(kind: str, ident: int) -> str:
    return base64.b64encode(f"0{len(kind)}:{kind}{ident}".encode()).decode()


@functools.cache
def _example(name: str) -> Any:
    return rest_spec().document["components"]["examples"][name]["value"]


def example(name: str) -> Any:
    """One of the description's response examples, as GitHub documents it (do not change it)."""
    return _example(name)


def _rewrite(node: Any, pairs: list[tuple[str, str]]) -> Any:
    if isinstance(node, str):
        for old, new in pairs:
            node = node.replace(old, new)
        return node
    if isinstance(node, dict):
        return {k: _rewrite(v, pairs) for k, v in node.items()}
    if isinstance(node, list):
        return [_rewrite(v, pairs) for v in node]
    return node


def user(site: Site, login: str, type_: str = "User") -> dict[str, Any]:
    template = copy.deepcopy(_example("issue-comment")["user"])
    out: dict[str, Any] = _rewrite(template, [(GITHUB_API, site.api), ("octocat", login)])
    out.update(
        login=login,
        id=stable_id(login),
        node_id=node_id("User" if type_ != "Bot" else "Bot", stable_id(login)),
        type=type_,
        site_admin=False,
        avatar_url=f"https://avatars.githubusercontent.com/u/{stable_id(login)}?v=4",
    )
    return out


def app_user(site: Site) -> dict[str, Any]:
    return user(site, f"{site.app_slug}[bot]", "Bot")


def app(site: Site) -> dict[str, Any]:
    out: dict[str, Any] = copy.deepcopy(_example("integration"))
    out.update(
        id=site.app_id,
        slug=site.app_slug,
        client_id=f"Iv1.{site.app_id:016x}",
        node_id=node_id("Integration", site.app_id),
        owner=user(site, site.app_owner, "Organization"),
        name=site.app_name,
        html_url=f"{HTML}/apps/{site.app_slug}",
        permissions={
            "metadata": "read",
            "contents": "read",
            "issues": "write",
            "pull_requests": "write",
            "checks": "write",
            "members": "read",
        },
        events=["check_run", "issue_comment", "pull_request"],
    )
    return out


def repository(site: Site, full_name: str, *, private: bool, default_branch: str) -> dict[str, Any]:
    owner, name = full_name.split("/", 1)
    template = copy.deepcopy(_example("pull-request")["base"]["repo"])
    out: dict[str, Any] = _rewrite(template, [(GITHUB_API, site.api), ("octocat/Hello-World", full_name)])
    out.update(
        id=stable_id(full_name),
        node_id=node_id("Repository", stable_id(full_name)),
        name=name,
        full_name=full_name,
        owner=user(site, owner),
        private=private,
        fork=False,
        default_branch=default_branch,
        visibility="private" if private else "public",
    )
    return out


def _links(site: Site, full_name: str, number: int, head_sha: str) -> dict[str, Any]:
    api = f"{site.api}/repos/{full_name}"
    return {
        "self": {"href": f"{api}/pulls/{number}"},
        "html": {"href": f"{HTML}/{full_name}/pull/{number}"},
        "issue": {"href": f"{api}/issues/{number}"},
        "comments": {"href": f"{api}/issues/{number}/comments"},
        "review_comments": {"href": f"{api}/pulls/{number}/comments"},
        "review_comment": {"href": f"{api}/pulls/comments{{/number}}"},
        "commits": {"href": f"{api}/pulls/{number}/commits"},
        "statuses": {"href": f"{api}/statuses/{head_sha}"},
    }


def label(site: Site, full_name: str, name: str) -> dict[str, Any]:
    ident = stable_id(f"{full_name}#{name}")
    return {
        "id": ident,
        "node_id": node_id("Label", ident),
        "url": f"{site.api}/repos/{full_name}/labels/{name}",
        "name": name,
        "description": None,
        "color": hashlib.sha1(name.encode()).hexdigest()[:6],
        "default": False,
    }


def _branch(site: Site, repo: Repo, full_name: str | None, ref: str, sha: str) -> dict[str, Any]:
    owner = (full_name or repo.full_name).split("/", 1)[0]
    head_repo = None
    if full_name is not None:
        head_repo = repository(site, full_name, private=repo.private, default_branch=repo.default_branch)
        head_repo["fork"] = full_name != repo.full_name
        if full_name == repo.full_name and repo.clone_url:
            head_repo["clone_url"] = repo.clone_url
    return {"label": f"{owner}:{ref}", "ref": ref, "sha": sha, "user": user(site, owner), "repo": head_repo}


def pull_request(site: Site, repo: Repo, pr: PullRequest, updated_at: datetime) -> dict[str, Any]:
    full = repo.full_name
    api = f"{site.api}/repos/{full}"
    out: dict[str, Any] = copy.deepcopy(_example("pull-request"))
    out.update(
        url=f"{api}/pulls/{pr.number}",
        id=pr.id,
        node_id=node_id("PullRequest", pr.id),
        html_url=f"{HTML}/{full}/pull/{pr.number}",
        diff_url=f"{HTML}/{full}/pull/{pr.number}.diff",
        patch_url=f"{HTML}/{full}/pull/{pr.number}.patch",
        issue_url=f"{api}/issues/{pr.number}",
        commits_url=f"{api}/pulls/{pr.number}/commits",
        review_comments_url=f"{api}/pulls/{pr.number}/comments",
        review_comment_url=f"{api}/pulls/comments{{/number}}",
        comments_url=f"{api}/issues/{pr.number}/comments",
        statuses_url=f"{api}/statuses/{pr.head_sha}",
        number=pr.number,
        state=pr.state,
        locked=False,
        title=pr.title,
        user=user(site, pr.author),
        body=pr.body,
        labels=[label(site, full, name) for name in pr.labels],
        milestone=None,
        active_lock_reason=None,
        created_at=iso(pr.created_at),
        updated_at=iso(updated_at),
        closed_at=iso(pr.merged_at),
        merged_at=iso(pr.merged_at),
        merge_commit_sha=None,
        assignee=None,
        assignees=[],
        requested_reviewers=[],
        requested_teams=[],
        head=_branch(site, repo, pr.head_repo, pr.head_ref, pr.head_sha),
        base=_branch(site, repo, full, pr.base_ref, pr.base_sha),
        _links=_links(site, full, pr.number, pr.head_sha),
        author_association=pr.author_association,
        auto_merge=None,
        draft=pr.draft,
        merged=pr.merged_at is not None,
        mergeable=None,
        rebaseable=None,
        mergeable_state="unknown",
        merged_by=None,
        comments=0,
        review_comments=0,
        maintainer_can_modify=False,
        commits=1,
        additions=sum(f.additions for f in pr.files),
        deletions=sum(f.deletions for f in pr.files),
        changed_files=len(pr.files),
    )
    return out


def pull_request_simple(site: Site, repo: Repo, pr: PullRequest, updated_at: datetime) -> dict[str, Any]:
    keys = _example("pull-request-simple-items")[0].keys()
    full = pull_request(site, repo, pr, updated_at)
    return {k: full[k] for k in keys if k in full}


def pull_file(site: Site, repo: Repo, pr: PullRequest, f: PullFile) -> dict[str, Any]:
    out: dict[str, Any] = {
        "sha": f.sha,
        "filename": f.filename,
        "status": f.status,
        "additions": f.additions,
        "deletions": f.deletions,
        "changes": f.additions + f.deletions,
        "blob_url": f"{HTML}/{repo.full_name}/blob/{pr.head_sha}/{f.filename}",
        "raw_url": f"{HTML}/{repo.full_name}/raw/{pr.head_sha}/{f.filename}",
        "contents_url": f"{site.api}/repos/{repo.full_name}/contents/{f.filename}?ref={pr.head_sha}",
    }
    if f.patch is not None:
        out["patch"] = f.patch
    if f.previous_filename is not None:
        out["previous_filename"] = f.previous_filename
    return out


def git_blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def content_file(site: Site, repo: Repo, path: str, ref: str, data: bytes) -> dict[str, Any]:
    sha = git_blob_sha(data)
    encoded = base64.b64encode(data).decode()
    # GitHub wraps the base64 text at 60 characters, with a trailing newline.
    wrapped = "".join(encoded[i : i + 60] + "\n" for i in range(0, len(encoded), 60))
    api = f"{site.api}/repos/{repo.full_name}"
    html = f"{HTML}/{repo.full_name}/blob/{ref}/{path}"
    return {
        "type": "file",
        "encoding": "base64",
        "size": len(data),
        "name": path.rsplit("/", 1)[-1],
        "path": path,
        "content": wrapped,
        "sha": sha,
        "url": f"{api}/contents/{path}?ref={ref}",
        "git_url": f"{api}/git/blobs/{sha}",
        "html_url": html,
        "download_url": f"https://raw.githubusercontent.com/{repo.full_name}/{ref}/{path}",
        "_links": {"git": f"{api}/git/blobs/{sha}", "self": f"{api}/contents/{path}?ref={ref}", "html": html},
    }


def content_entry(site: Site, repo: Repo, path: str, ref: str, is_dir: bool, data: bytes) -> dict[str, Any]:
    out = content_file(site, repo, path, ref, data)
    del out["content"], out["encoding"]
    if is_dir:
        out.update(type="dir", size=0, download_url=None)
    return out


def _reaction_rollup(site: Site, comment: Comment) -> dict[str, Any]:
    counts = {k: sum(1 for r in comment.reactions if r.content == k) for k in _REACTION_KEYS}
    return {
        "url": f"{site.api}/repos/{comment.repo}/issues/comments/{comment.id}/reactions",
        "total_count": len(comment.reactions),
        **counts,
    }


def issue_comment(site: Site, comment: Comment, on_pull: bool) -> dict[str, Any]:
    kind = "pull" if on_pull else "issues"
    out: dict[str, Any] = copy.deepcopy(_example("issue-comment"))
    out.update(
        id=comment.id,
        node_id=node_id("IssueComment", comment.id),
        url=f"{site.api}/repos/{comment.repo}/issues/comments/{comment.id}",
        html_url=f"{HTML}/{comment.repo}/{kind}/{comment.issue_number}#issuecomment-{comment.id}",
        body=comment.body,
        user=user(site, comment.user, comment.user_type),
        created_at=iso(comment.created_at),
        updated_at=iso(comment.updated_at),
        issue_url=f"{site.api}/repos/{comment.repo}/issues/{comment.issue_number}",
        author_association=comment.author_association,
        performed_via_github_app=app(site) if comment.user_type == "Bot" else None,
        reactions=_reaction_rollup(site, comment),
    )
    return out


def reaction(site: Site, r: Reaction) -> dict[str, Any]:
    return {
        "id": r.id,
        "node_id": node_id("Reaction", r.id),
        "user": user(site, r.user, r.user_type),
        "content": r.content,
        "created_at": iso(r.created_at),
    }


def check_run(site: Site, run: CheckRun, pulls: list[tuple[Repo, PullRequest]]) -> dict[str, Any]:
    api = f"{site.api}/repos/{run.repo}"
    output = run.output
    return {
        "id": run.id,
        "head_sha": run.head_sha,
        "node_id": node_id("CheckRun", run.id),
        "external_id": run.external_id if run.external_id is not None else "",
        "url": f"{api}/check-runs/{run.id}",
        "html_url": f"{HTML}/{run.repo}/runs/{run.id}",
        "details_url": run.details_url if run.details_url is not None else f"{HTML}/apps/{site.app_slug}",
        "status": run.status,
        "conclusion": run.conclusion,
        "started_at": iso(run.started_at),
        "completed_at": iso(run.completed_at),
        "output": {
            "title": output.get("title"),
            "summary": output.get("summary"),
            "text": output.get("text"),
            "annotations_count": len(run.annotations),
            "annotations_url": f"{api}/check-runs/{run.id}/annotations",
        },
        "name": run.name,
        "check_suite": {"id": stable_id(f"{run.repo}@{run.head_sha}")},
        "app": app(site),
        "pull_requests": [_pull_minimal(site, repo, pr) for repo, pr in pulls],
    }


def _pull_minimal(site: Site, repo: Repo, pr: PullRequest) -> dict[str, Any]:
    ref = {"id": repo.id, "url": f"{site.api}/repos/{repo.full_name}", "name": repo.name}
    return {
        "id": pr.id,
        "number": pr.number,
        "url": f"{site.api}/repos/{repo.full_name}/pulls/{pr.number}",
        "head": {"ref": pr.head_ref, "sha": pr.head_sha, "repo": ref},
        "base": {"ref": pr.base_ref, "sha": pr.base_sha, "repo": ref},
    }


def annotation(site: Site, run: CheckRun, a: dict[str, Any]) -> dict[str, Any]:
    return {
        "path": a["path"],
        "start_line": a["start_line"],
        "end_line": a["end_line"],
        "start_column": a.get("start_column"),
        "end_column": a.get("end_column"),
        "annotation_level": a.get("annotation_level"),
        "title": a.get("title"),
        "message": a.get("message"),
        "raw_details": a.get("raw_details"),
        "blob_href": f"{HTML}/{run.repo}/blob/{run.head_sha}/{a['path']}",
    }


def installation(site: Site, inst: Installation) -> dict[str, Any]:
    out: dict[str, Any] = copy.deepcopy(_example("installation"))
    out.update(
        id=inst.id,
        account=user(site, inst.account, inst.account_type),
        access_tokens_url=f"{site.api}/app/installations/{inst.id}/access_tokens",
        repositories_url=f"{site.api}/installation/repositories",
        html_url=f"{HTML}/organizations/{inst.account}/settings/installations/{inst.id}",
        app_id=site.app_id,
        app_slug=site.app_slug,
        target_id=stable_id(inst.account),
        target_type=inst.account_type,
        permissions=app(site)["permissions"],
        events=app(site)["events"],
    )
    return out
