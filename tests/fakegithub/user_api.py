"""API operations a browser's side of the App calls: as a signed-in viewer (a user token of the
App's user authorization), the manifest conversion that registers the App (no credential), and
revoking a viewer's token when the viewer signs out (the App's client id and secret, HTTP Basic)."""

from __future__ import annotations

import copy
import secrets
from typing import Any

from aiohttp import web

from . import render
from .handlers import Ctx, GitHubError, not_found, respond

# Operations GitHub answers without any credential.
UNAUTHENTICATED = frozenset({"apps/create-from-manifest"})
# Operations GitHub answers only to the App's client: Basic, its client id and secret.
CLIENT_CREDENTIALS = frozenset({"apps/delete-token"})


def _needs_user(ctx: Ctx) -> str:
    if ctx.user_login is None:
        raise GitHubError(403, "Resource not accessible by integration")
    return ctx.user_login


async def get_authenticated_user(ctx: Ctx) -> web.Response:
    login = _needs_user(ctx)
    # The description's own example of a private user (oneOf private/public: it must fit one only).
    out: dict[str, Any] = copy.deepcopy(render.example("private-user"))
    out.update({k: v for k, v in render.user(ctx.site, login).items() if k in out}, name=login)
    return respond(out)


async def get_repo(ctx: Ctx) -> web.Response:
    """A user token sees a repository the App is installed on that the user can read (a private
    one: only with a role in it); an installation token, the repositories of its installation."""
    if ctx.user_login is None:
        repo = ctx.repo()
        role = None
    else:
        repo = ctx.fake.find_repo(f"{ctx.params['owner']}/{ctx.params['repo']}")
        if repo is None:
            raise not_found()
        role = repo.roles.get(ctx.user_login.lower())
        if repo.private and role in (None, "none"):
            raise not_found()
    out: dict[str, Any] = copy.deepcopy(render.example("full-repository"))
    for key in ("template_repository", "organization", "parent", "source"):
        out.pop(key, None)
    shown = render.repository(
        ctx.site, repo.full_name, private=repo.private, default_branch=repo.default_branch
    )
    out.update(shown)
    if ctx.user_login is not None:
        writes = role in ("admin", "maintain", "write")
        out["permissions"] = {
            "admin": role == "admin",
            "maintain": role in ("admin", "maintain"),
            "push": writes,
            "triage": writes or role == "triage",
            "pull": True,
        }
    return respond(out)


async def create_from_manifest(ctx: Ctx) -> web.Response:
    manifest = ctx.fake.web.convert(ctx.params["code"])
    if manifest is None:
        raise not_found()
    fake = ctx.fake
    fake.webhook_secret = secrets.token_hex(20)
    out: dict[str, Any] = copy.deepcopy(render.app(ctx.site))
    out.update(
        name=str(manifest.get("name") or fake.app_name),
        description=str(manifest.get("description") or ""),
        external_url=str(manifest["url"]),
        permissions=dict(manifest.get("default_permissions") or {}),
        events=list(manifest.get("default_events") or []),
        client_id=fake.web.client_id,
        client_secret=fake.web.client_secret,
        webhook_secret=fake.webhook_secret,
        pem=fake.private_key_pem,
    )
    fake.web.conversions.append(out)
    return respond(out, 201)


async def delete_token(ctx: Ctx) -> web.Response:
    """Revoke one user token of the App's user authorization ("Delete an app token"): it no longer
    reads anything. GitHub answers 404 for a token it does not know (expired, revoked, another
    App's)."""
    if ctx.params["client_id"] != ctx.fake.web.client_id:
        raise not_found()
    token = str(ctx.body["access_token"])
    if ctx.fake.web.user_tokens.pop(token, None) is None:
        raise not_found()
    ctx.fake.web.revoked.append(token)
    return respond(None, 204)


HANDLERS = {
    "users/get-authenticated": get_authenticated_user,
    "repos/get": get_repo,
    "apps/create-from-manifest": create_from_manifest,
    "apps/delete-token": delete_token,
}
