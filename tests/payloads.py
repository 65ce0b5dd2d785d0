"""Real GitHub webhook payloads for tests, and cases derived from them by changing only what a test needs.

Sources (vendored in ``tests/fixtures/github/``): npm ``@octokit/webhooks-examples`` 7.6.1 (the
payloads) and npm ``@octokit/webhooks-schemas`` 7.6.1 (their draft-07 schema). Every payload a
``*_event`` function returns has been validated against the schema definition ``<event>$<action>``
(or ``<event>$event``), so a derivation that drifts from what GitHub sends fails loudly.

The functions leave a field as the real example has it unless an argument asks otherwise.
"""

from __future__ import annotations

import copy
import functools
import gzip
import hashlib
import hmac
import json
import uuid
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "github"
_SCHEMA_URI = "urn:github-webhooks-schema"
GITHUB_API = "https://api.github.com"

Payload = dict[str, Any]


class PayloadSchemaError(AssertionError):
    """A payload that GitHub's webhook schema rejects."""


@functools.cache
def _examples() -> dict[str, list[Payload]]:
    with gzip.open(FIXTURES / "webhooks-examples.json.gz", "rt", encoding="utf-8") as fh:
        return {entry["name"]: entry["examples"] for entry in json.load(fh)}


@functools.cache
def _schema() -> dict[str, Any]:
    with gzip.open(FIXTURES / "webhooks-schema.json.gz", "rt", encoding="utf-8") as fh:
        document: dict[str, Any] = json.load(fh)
    return document


def examples() -> dict[str, list[Payload]]:
    """Every real example, by event (shared: deep-copy one before changing it)."""
    return _examples()


def schema() -> dict[str, Any]:
    """GitHub's webhook schema (shared: do not change it)."""
    return _schema()


@functools.cache
def _validator(key: str) -> Draft7Validator:
    # Validating against one definition (not the top-level oneOf) costs milliseconds, not 0.5 s.
    registry: Registry[Any] = Registry().with_resource(
        _SCHEMA_URI, Resource.from_contents(_schema(), default_specification=DRAFT7)
    )
    return Draft7Validator(
        {"$ref": f"{_SCHEMA_URI}#/definitions/{key}"},
        registry=registry,
        format_checker=Draft7Validator.FORMAT_CHECKER,
    )


def schema_key(event: str, payload: Mapping[str, Any]) -> str:
    """The schema definition a payload of ``event`` is checked against."""
    action = payload.get("action")
    key = f"{event}${action}"
    if action is not None and key in _schema()["definitions"]:
        return key
    return f"{event}$event"


def schema_errors(event: str, payload: Mapping[str, Any]) -> list[str]:
    key = schema_key(event, payload)
    if key not in _schema()["definitions"]:
        return [f"the webhook schema has no definition {key!r}"]
    errors = _validator(key).iter_errors(payload)
    return [f"{'/'.join(map(str, e.absolute_path)) or '<payload>'}: {e.message[:300]}" for e in errors]


def validate(event: str, payload: Mapping[str, Any]) -> None:
    """Raise :class:`PayloadSchemaError` unless GitHub's webhook schema accepts the payload."""
    errors = schema_errors(event, payload)
    if errors:
        raise PayloadSchemaError(
            f"{schema_key(event, payload)} payload breaks the schema:\n  " + "\n  ".join(errors)
        )


def actions(event: str) -> list[str | None]:
    """The action of each real example of ``event``, in order (None for action-less events)."""
    return [e.get("action") for e in _examples_of(event)]


def _examples_of(event: str) -> list[Payload]:
    try:
        return _examples()[event]
    except KeyError:
        raise LookupError(f"no webhook examples for event {event!r}") from None


def example(event: str, action: str | None = None, *, index: int = 0) -> Payload:
    """A deep copy of the ``index``-th real example of ``event`` with ``action`` (as GitHub sent it;
    some older examples lack fields the current schema requires)."""
    matching = [e for e in _examples_of(event) if action is None or e.get("action") == action]
    if not matching:
        raise LookupError(
            f"no {event!r} example with action {action!r}; have {sorted(set(map(str, actions(event))))}"
        )
    if not 0 <= index < len(matching):
        raise LookupError(f"{event}.{action} has {len(matching)} examples; index {index} is out of range")
    return copy.deepcopy(matching[index])


def _base(event: str, action: str | None, index: int | None) -> Payload:
    """The example to derive from: the one asked for, or the first the schema accepts."""
    if index is not None:
        return example(event, action, index=index)
    count = sum(1 for e in _examples_of(event) if action is None or e.get("action") == action)
    for i in range(count):
        candidate = example(event, action, index=i)
        if not schema_errors(event, candidate):
            return candidate
    raise LookupError(f"no {event}.{action} example passes the schema; pass index= to choose one")


# --- small builders -------------------------------------------------------------------------


def _stable_id(text: str) -> int:
    return zlib.crc32(text.encode()) % 90_000_000 + 10_000_000


def _replace_strings(node: Any, old: str, new: str) -> Any:
    if isinstance(node, str):
        return node.replace(old, new)
    if isinstance(node, dict):
        return {k: _replace_strings(v, old, new) for k, v in node.items()}
    if isinstance(node, list):
        return [_replace_strings(v, old, new) for v in node]
    return node


def _user(template: Mapping[str, Any], login: str) -> dict[str, Any]:
    """``template`` (a user object from the example) as the account ``login``."""
    out: dict[str, Any] = _replace_strings(
        copy.deepcopy(dict(template)), f"/{template['login']}", f"/{login}"
    )
    out["login"] = login
    out["id"] = _stable_id(login)
    out["node_id"] = f"U_{_stable_id(login)}"
    out["avatar_url"] = f"https://avatars.githubusercontent.com/u/{out['id']}?v=4"
    return out


def _set_repo_identity(
    repo: dict[str, Any], full_name: str, owner: dict[str, Any], clone_url: str | None
) -> None:
    repo["name"] = full_name.split("/", 1)[1]
    repo["full_name"] = full_name
    repo["owner"] = owner
    repo["id"] = _stable_id(full_name)
    if clone_url is not None:
        repo["clone_url"] = clone_url


def _label(api: str, full_name: str, name: str) -> dict[str, Any]:
    ident = _stable_id(f"{full_name}#{name}")
    return {
        "id": ident,
        "node_id": f"LA_{ident}",
        "url": f"{api}/repos/{full_name}/labels/{name}",
        "name": name,
        "color": hashlib.sha1(name.encode()).hexdigest()[:6],
        "default": False,
        "description": None,
    }


def _api_of(payload: Mapping[str, Any]) -> str:
    url: str = payload["repository"]["url"]
    return url.split("/repos/", 1)[0]


def pointed_at(
    payload: Payload,
    *,
    repo_full_name: str | None = None,
    clone_url: str | None = None,
    installation_id: int | None = None,
    api_url: str | None = None,
) -> Payload:
    """Any payload with a ``repository``, pointed at another repository, installation and API root
    (not checked against the schema: a fuzz test changes it further)."""
    if api_url is not None:
        payload = _replace_strings(payload, GITHUB_API, api_url.rstrip("/"))
    repo = payload["repository"]
    if repo_full_name is not None and repo_full_name != repo["full_name"]:
        payload = _replace_strings(payload, f"/{repo['full_name']}", f"/{repo_full_name}")
        repo = payload["repository"]
        owner = _user(repo["owner"], repo_full_name.split("/", 1)[0])
        owner["type"] = repo["owner"]["type"]
        for same in _same_repo_objects(payload):
            _set_repo_identity(same, repo_full_name, owner, None)
    if clone_url is not None:
        for same in _same_repo_objects(payload):
            same["clone_url"] = clone_url
    if installation_id is not None:
        payload["installation"] = {
            "id": installation_id,
            "node_id": f"MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9u{installation_id}",
        }
    return payload


def _same_repo_objects(payload: Payload) -> list[dict[str, Any]]:
    """``repository`` and every copy of it inside the payload (a PR's base, and head unless forked)."""
    repo = payload["repository"]
    found = [repo]
    pr = payload.get("pull_request")
    if isinstance(pr, dict):
        for side in ("base", "head"):
            other = pr[side].get("repo")
            if isinstance(other, dict) and other.get("id") == repo["id"] and not other.get("fork"):
                found.append(other)
    return found


def _finish(event: str, payload: Payload) -> Payload:
    validate(event, payload)
    return payload


# --- events ---------------------------------------------------------------------------------


def event(
    name: str,
    action: str | None = None,
    *,
    index: int | None = None,
    repo_full_name: str | None = None,
    clone_url: str | None = None,
    installation_id: int | None = None,
    api_url: str | None = None,
) -> Payload:
    """Any event (ping, push, installation, check_suite …) pointed at a repository/installation."""
    payload = _base(name, action, index)
    if "repository" in payload:
        payload = pointed_at(
            payload,
            repo_full_name=repo_full_name,
            clone_url=clone_url,
            installation_id=installation_id,
            api_url=api_url,
        )
    elif installation_id is not None:
        payload["installation"]["id"] = installation_id
    return _finish(name, payload)


def _set_pr_number_and_sha(pr: dict[str, Any], api: str, html: str, full: str, number: int, sha: str) -> None:
    pr["number"] = number
    pr["url"] = f"{api}/repos/{full}/pulls/{number}"
    pr["html_url"] = f"{html}/pull/{number}"
    pr["diff_url"] = f"{html}/pull/{number}.diff"
    pr["patch_url"] = f"{html}/pull/{number}.patch"
    pr["issue_url"] = f"{api}/repos/{full}/issues/{number}"
    pr["commits_url"] = f"{api}/repos/{full}/pulls/{number}/commits"
    pr["review_comments_url"] = f"{api}/repos/{full}/pulls/{number}/comments"
    pr["comments_url"] = f"{api}/repos/{full}/issues/{number}/comments"
    pr["statuses_url"] = f"{api}/repos/{full}/statuses/{sha}"
    links = pr["_links"]
    links["self"]["href"] = pr["url"]
    links["html"]["href"] = pr["html_url"]
    links["issue"]["href"] = pr["issue_url"]
    links["comments"]["href"] = pr["comments_url"]
    links["review_comments"]["href"] = pr["review_comments_url"]
    links["commits"]["href"] = pr["commits_url"]
    links["statuses"]["href"] = pr["statuses_url"]


def _fork(pr: dict[str, Any], base_repo: Mapping[str, Any], fork_owner: str, clone_url: str | None) -> None:
    """Make the PR's head live in ``fork_owner``'s fork of the base repository."""
    fork_full = f"{fork_owner}/{base_repo['name']}"
    head_repo: dict[str, Any] = _replace_strings(
        copy.deepcopy(dict(base_repo)), f"/{base_repo['full_name']}", f"/{fork_full}"
    )
    owner = _user(base_repo["owner"], fork_owner)
    owner["type"] = "User"
    _set_repo_identity(head_repo, fork_full, owner, clone_url)
    head_repo["fork"] = True
    head_repo["node_id"] = f"R_{head_repo['id']}"
    pr["head"]["repo"] = head_repo
    pr["head"]["user"] = owner
    pr["head"]["label"] = f"{fork_owner}:{pr['head']['ref']}"


def pull_request_event(
    action: str = "opened",
    *,
    index: int | None = None,
    number: int | None = None,
    title: str | None = None,
    body: str | None = None,
    author: str | None = None,
    author_association: str | None = None,
    head_sha: str | None = None,
    head_ref: str | None = None,
    base_ref: str | None = None,
    base_sha: str | None = None,
    labels: Iterable[str] | None = None,
    draft: bool | None = None,
    fork_owner: str | None = None,
    fork_deleted: bool = False,
    head_clone_url: str | None = None,
    repo_full_name: str | None = None,
    clone_url: str | None = None,
    installation_id: int | None = None,
    api_url: str | None = None,
    sender: str | None = None,
) -> Payload:
    """A ``pull_request`` payload. ``fork_owner``: the head lives in that user's fork
    (``head_clone_url`` is the fork's clone URL); ``fork_deleted``: the head repo is gone (null).
    ``sender`` defaults to ``author`` when that is given."""
    payload = pointed_at(
        _base("pull_request", action, index),
        repo_full_name=repo_full_name,
        clone_url=clone_url,
        installation_id=installation_id,
        api_url=api_url,
    )
    pr, repo = payload["pull_request"], payload["repository"]
    api, html, full = _api_of(payload), repo["html_url"], repo["full_name"]
    if number is not None or head_sha is not None:
        payload["number"] = number if number is not None else payload["number"]
        if head_sha is not None:
            pr["head"]["sha"] = head_sha
        _set_pr_number_and_sha(pr, api, html, full, payload["number"], pr["head"]["sha"])
    _set_if(pr, title=title, body=body, author_association=author_association, draft=draft)
    _set_if(pr["base"], ref=base_ref, sha=base_sha)
    if base_ref is not None:
        pr["base"]["label"] = f"{repo['owner']['login']}:{base_ref}"
    if head_ref is not None:
        pr["head"]["ref"] = head_ref
        pr["head"]["label"] = f"{pr['head']['label'].split(':', 1)[0]}:{head_ref}"
    if author is not None:
        pr["user"] = _user(pr["user"], author)
    if labels is not None:
        pr["labels"] = [_label(api, full, name) for name in labels]
    if fork_owner is not None:
        _fork(pr, repo, fork_owner, head_clone_url)
    if fork_deleted:
        pr["head"]["repo"] = None
    actor = sender if sender is not None else author
    if actor is not None:
        payload["sender"] = _user(payload["sender"], actor)
    return _finish("pull_request", payload)


def _set_if(target: dict[str, Any], **values: Any) -> None:
    for key, value in values.items():
        if value is not None:
            target[key] = value


def issue_comment_event(
    action: str = "created",
    *,
    index: int | None = None,
    body: str | None = None,
    commenter: str | None = None,
    author_association: str | None = None,
    comment_id: int | None = None,
    on_pull_request: bool = True,
    number: int | None = None,
    merged_at: str | None = None,
    issue_author: str | None = None,
    issue_author_association: str | None = None,
    repo_full_name: str | None = None,
    clone_url: str | None = None,
    installation_id: int | None = None,
    api_url: str | None = None,
) -> Payload:
    """An ``issue_comment`` payload, by default on a pull request (``issue.pull_request`` set, as
    GitHub sends for PR conversation comments). ``commenter`` also becomes the sender."""
    payload = pointed_at(
        _base("issue_comment", action, index),
        repo_full_name=repo_full_name,
        clone_url=clone_url,
        installation_id=installation_id,
        api_url=api_url,
    )
    issue, comment, repo = payload["issue"], payload["comment"], payload["repository"]
    api, html, full = _api_of(payload), repo["html_url"], repo["full_name"]
    n = number if number is not None else issue["number"]
    issue["number"] = n
    issue_api = f"{api}/repos/{full}/issues/{n}"
    issue.update(
        url=issue_api,
        repository_url=f"{api}/repos/{full}",
        labels_url=f"{issue_api}/labels{{/name}}",
        comments_url=f"{issue_api}/comments",
        events_url=f"{issue_api}/events",
        html_url=f"{html}/{'pull' if on_pull_request else 'issues'}/{n}",
    )
    if on_pull_request:
        issue["pull_request"] = {
            "url": f"{api}/repos/{full}/pulls/{n}",
            "html_url": f"{html}/pull/{n}",
            "diff_url": f"{html}/pull/{n}.diff",
            "patch_url": f"{html}/pull/{n}.patch",
            "merged_at": merged_at,
        }
    else:
        issue.pop("pull_request", None)
    if issue_author is not None:
        issue["user"] = _user(issue["user"], issue_author)
    _set_if(issue, author_association=issue_author_association)
    _set_if(comment, body=body, author_association=author_association, id=comment_id)
    if commenter is not None:
        comment["user"] = _user(comment["user"], commenter)
        payload["sender"] = _user(payload["sender"], commenter)
    comment["issue_url"] = issue_api
    comment["url"] = f"{api}/repos/{full}/issues/comments/{comment['id']}"
    comment["html_url"] = f"{issue['html_url']}#issuecomment-{comment['id']}"
    return _finish("issue_comment", payload)


def check_run_event(
    action: str = "rerequested",
    *,
    index: int | None = None,
    head_sha: str | None = None,
    name: str | None = None,
    check_run_id: int | None = None,
    external_id: str | None = None,
    app_id: int | None = None,
    app_slug: str | None = None,
    requested_action: str | None = None,
    repo_full_name: str | None = None,
    clone_url: str | None = None,
    installation_id: int | None = None,
    api_url: str | None = None,
) -> Payload:
    """A ``check_run`` payload for a run of app ``app_id``. The real ``rerequested`` examples carry
    the app's timestamps as ``2018-04-25 20:42:10``, which the current schema (and GitHub today)
    writes as ``2018-04-25T20:42:10Z``; only those four fields are rewritten."""
    if action == "rerequested" and index is None:
        base = example("check_run", action)
        for app in (base["check_run"]["app"], base["check_run"]["check_suite"]["app"]):
            for key in ("created_at", "updated_at"):
                app[key] = app[key].replace(" ", "T") + "Z" if " " in app[key] else app[key]
    else:
        base = _base("check_run", action, index)
    payload = pointed_at(
        base,
        repo_full_name=repo_full_name,
        clone_url=clone_url,
        installation_id=installation_id,
        api_url=api_url,
    )
    payload["action"] = action
    run = payload["check_run"]
    _set_if(run, head_sha=head_sha, name=name, id=check_run_id, external_id=external_id)
    if head_sha is not None:
        run["check_suite"]["head_sha"] = head_sha
    if app_id is not None:
        run["app"]["id"] = app_id
        run["check_suite"]["app"]["id"] = app_id
    if app_slug is not None:
        run["app"]["slug"] = app_slug
        run["check_suite"]["app"]["slug"] = app_slug
    if requested_action is not None:
        payload["requested_action"] = {"identifier": requested_action}
    return _finish("check_run", payload)


# --- delivery -------------------------------------------------------------------------------


def encode(payload: Mapping[str, Any]) -> bytes:
    """The body GitHub would POST (compact JSON, UTF-8)."""
    return json.dumps(payload, separators=(",", ":")).encode()


def sign(body: bytes, secret: str | bytes) -> str:
    """``X-Hub-Signature-256`` for ``body``: ``sha256=`` + hex HMAC-SHA256 with the webhook secret."""
    key = secret.encode() if isinstance(secret, str) else secret
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def webhook_headers(
    event: str, body: bytes, secret: str | bytes, *, delivery_id: str | None = None
) -> dict[str, str]:
    """The headers of a delivery (reuse ``delivery_id`` to model a redelivery)."""
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(body, secret),
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/test",
    }


def delivery(
    event: str, payload: Mapping[str, Any], secret: str | bytes, *, delivery_id: str | None = None
) -> tuple[bytes, dict[str, str]]:
    """``(body, headers)`` ready to POST to the bot's webhook endpoint."""
    body = encode(payload)
    return body, webhook_headers(event, body, secret, delivery_id=delivery_id)


def sample_pr_event(
    action: str, sample: Any, *, repo: str, clone_url: str, api_url: str, **overrides: Any
) -> dict[str, Any]:
    """PR 7 of ``repo`` proposing the sample repository's head on its base, as the harnesses send it."""
    values: dict[str, Any] = dict(
        number=7,
        head_sha=sample.head_sha,
        base_ref="main",
        base_sha=sample.base_sha,
        repo_full_name=repo,
        clone_url=clone_url,
        installation_id=1,
        api_url=api_url,
    )
    return pull_request_event(action, **(values | overrides))
