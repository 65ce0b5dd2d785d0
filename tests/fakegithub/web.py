"""The fake's "github.com" side: what a browser meets on GitHub's website, not its API.

- the App's user authorization (OAuth web flow): ``GET /login/oauth/authorize`` sends the browser
  back to the App's callback with a one-time code, for whoever is signed in to the fake GitHub
  (:meth:`WebSide.sign_in`); ``POST /login/oauth/access_token`` trades that code for a user token;
- registering an App from a manifest: ``POST /settings/apps/new`` (or an organization's) takes the
  form with the manifest and sends the browser to its ``redirect_url`` with a code, which
  ``POST /app-manifests/{code}/conversions`` (the API, validated like every request) turns into
  the App's credentials.

A request GitHub would refuse is answered as GitHub does and recorded as a violation, so a test
fails on it unless it said it expected one.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from aiohttp import web

from .state import Violation

if TYPE_CHECKING:
    from .server import FakeGitHub

CODE_TTL = timedelta(minutes=10)  # GitHub's codes expire after ten minutes (manifest codes: one hour)


@dataclass
class UserToken:
    token: str
    login: str
    expires_at: datetime


@dataclass
class WebSide:
    """What the website keeps: the App's client credentials, codes, user tokens, manifests."""

    fake: FakeGitHub
    client_id: str = field(default_factory=lambda: "Iv1." + secrets.token_hex(8))
    client_secret: str = field(default_factory=lambda: secrets.token_hex(20))
    callback_urls: list[str] = field(default_factory=list)
    signed_in: str | None = None
    codes: dict[str, tuple[str, str, datetime]] = field(default_factory=dict)
    user_tokens: dict[str, UserToken] = field(default_factory=dict)
    revoked: list[str] = field(default_factory=list)  # user tokens revoked by the App's client
    manifests: dict[str, tuple[dict[str, Any], datetime]] = field(default_factory=dict)
    conversions: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None

    def sign_in(self, login: str | None) -> None:
        """The person signed in to GitHub in the browser (None: nobody)."""
        self.signed_in = login

    def user_token(self, login: str, value: str | None = None) -> str:
        """A token of the App's user authorization for ``login``, as the code exchange issues
        (``value``: the token a test already gave its client)."""
        value = value or "ghu_" + secrets.token_hex(18)
        token = UserToken(value, login, self.fake.now() + timedelta(hours=8))
        self.user_tokens[token.token] = token
        return token.token

    def client_authenticates(self, authorization: str) -> bool:
        """Whether an Authorization header is HTTP Basic with the App's client id and secret."""
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        return user == self.client_id and password == self.client_secret

    def find_user(self, credential: str) -> str | None:
        token = self.user_tokens.get(credential)
        return token.login if token is not None and token.expires_at > self.fake.now() else None

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/login/oauth/authorize", self.authorize)
        app.router.add_post("/login/oauth/access_token", self.access_token)
        app.router.add_post("/settings/apps/new", self.new_app)
        app.router.add_post("/organizations/{org}/settings/apps/new", self.new_app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _refuse(self, request: web.Request, errors: list[str]) -> None:
        self.fake.violations.append(Violation("invalid-request", request.method, request.path, None, errors))

    # --- the OAuth web flow ---------------------------------------------------------------

    async def authorize(self, request: web.Request) -> web.StreamResponse:
        query = request.query
        redirect_uri = query.get("redirect_uri") or (self.callback_urls or [""])[0]
        if query.get("client_id") != self.client_id:
            self._refuse(request, [f"unknown client_id {query.get('client_id')!r}"])
            return web.Response(status=404, text="Not Found")
        if self.callback_urls and not any(redirect_uri.startswith(u) for u in self.callback_urls):
            # GitHub shows "The redirect_uri is not associated with this application" and stays.
            self._refuse(request, [f"redirect_uri {redirect_uri!r} is not one of {self.callback_urls}"])
            return web.Response(status=400, text="The redirect_uri MUST match the registered callback URL")
        if self.signed_in is None:
            return web.Response(text="<h1>Sign in to GitHub</h1>", content_type="text/html")
        code = secrets.token_hex(10)
        self.codes[code] = (self.signed_in, redirect_uri, self.fake.now() + CODE_TTL)
        back = {"code": code} | ({"state": query["state"]} if "state" in query else {})
        return _redirect(f"{redirect_uri}{'&' if '?' in redirect_uri else '?'}{urlencode(back)}")

    async def access_token(self, request: web.Request) -> web.StreamResponse:
        form: dict[str, Any] = dict(await request.post())
        if not form and request.can_read_body:
            form = json.loads(await request.read() or b"{}")
        answer = self._exchange(request, form)
        if "json" in request.headers.get("Accept", ""):
            return web.json_response(answer)
        return web.Response(text=urlencode(answer), content_type="application/x-www-form-urlencoded")

    def _exchange(self, request: web.Request, form: dict[str, Any]) -> dict[str, Any]:
        if form.get("client_id") != self.client_id or form.get("client_secret") != self.client_secret:
            self._refuse(request, ["incorrect client credentials"])
            return {"error": "incorrect_client_credentials"}
        found = self.codes.pop(str(form.get("code")), None)
        if found is None or found[2] <= self.fake.now():
            return {
                "error": "bad_verification_code",
                "error_description": "The code passed is incorrect or expired.",
            }
        login, redirect_uri, _ = found
        if form.get("redirect_uri") not in (None, redirect_uri):
            self._refuse(request, [f"redirect_uri {form.get('redirect_uri')!r} is not the authorize's"])
            return {"error": "redirect_uri_mismatch"}
        return {
            "access_token": self.user_token(login),
            "expires_in": 28800,
            "refresh_token": "ghr_" + secrets.token_hex(30),
            "refresh_token_expires_in": 15811200,
            "scope": "",
            "token_type": "bearer",
        }

    # --- registering an App from a manifest -----------------------------------------------

    async def new_app(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        try:
            manifest = json.loads(str(form.get("manifest", "")))
        except ValueError:
            manifest = None
        errors = manifest_errors(manifest)
        if errors:
            self._refuse(request, errors)
            return web.Response(status=422, text="Invalid GitHub App configuration: " + "; ".join(errors))
        code = secrets.token_hex(10)
        self.manifests[code] = (manifest, self.fake.now() + timedelta(hours=1))
        back = {"code": code} | ({"state": request.query["state"]} if "state" in request.query else {})
        return _redirect(f"{manifest['redirect_url']}?{urlencode(back)}")

    def convert(self, code: str) -> dict[str, Any] | None:
        """The App a manifest code registered, once: its manifest, or None for a bad code."""
        found = self.manifests.pop(code, None)
        if found is None or found[1] <= self.fake.now():
            return None
        manifest = found[0]
        self.callback_urls = list(manifest.get("callback_urls") or [])
        return manifest


def _redirect(location: str) -> web.Response:
    return web.Response(status=302, headers={"Location": location})


def manifest_errors(manifest: Any) -> list[str]:
    """What GitHub's manifest form refuses (docs: "Registering a GitHub App from a manifest")."""
    if not isinstance(manifest, dict):
        return ["manifest: not a JSON object"]
    errors = []
    if not isinstance(manifest.get("url"), str):
        errors.append("url: is required")
    hook = manifest.get("hook_attributes")
    if (hook is not None and not isinstance(hook, dict)) or (isinstance(hook, dict) and "url" not in hook):
        errors.append("hook_attributes.url: is required")
    for key in ("redirect_url", "setup_url"):
        if key in manifest and not str(manifest[key]).startswith(("http://", "https://")):
            errors.append(f"{key}: is not a URL")
    if "redirect_url" not in manifest:
        errors.append("redirect_url: the flow cannot send the code back without it")
    urls = manifest.get("callback_urls", [])
    if not isinstance(urls, list) or len(urls) > 10:
        errors.append("callback_urls: at most 10 URLs")
    known = {
        "name", "url", "hook_attributes", "redirect_url", "callback_urls", "setup_url", "description",
        "public", "default_events", "default_permissions", "request_oauth_on_install", "setup_on_update",
    }  # fmt: skip
    errors += [f"{key}: is not a manifest parameter" for key in manifest if key not in known]
    return errors
