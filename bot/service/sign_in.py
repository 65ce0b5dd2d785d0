"""Signing viewers in with GitHub: the App's user authorization (OAuth web flow), and the sealed
cookies that carry its state and the viewer's session.

:class:`OAuthClient` sends the browser to GitHub, trades the code it brings back for the viewer's
token, and revokes that token when the viewer signs out. :class:`Sealer` encrypts and signs what a
cookie carries (Fernet, with a key derived from the App's client secret by HKDF), so no page script
and no viewer can read or change it. Who may see what is :mod:`bot.service.viewers`'.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import structlog
from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from bot.service.github import USER_AGENT
from bot.service.logs import register_secret
from bot.service.settings import Settings, SettingsError

log = structlog.get_logger(__name__)

REVOKE_TIMEOUT = aiohttp.ClientTimeout(total=10)


def safe_next(target: str | None) -> str:
    """Where to go back after signing in: a path of this site only (no other host, no scheme)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    if any(ord(c) < 0x21 for c in target):
        return "/"
    return target


class Sealer:
    """Encrypts and signs what the cookies carry; a cookie changed or past its age reads as none."""

    def __init__(self, client_secret: str):
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"paritybot viewer session").derive(
            client_secret.encode()
        )
        self._fernet = Fernet(base64.urlsafe_b64encode(key))

    def seal(self, data: dict[str, Any]) -> str:
        return self._fernet.encrypt(json.dumps(data).encode()).decode()

    def open(self, value: str | None, max_age_s: int) -> dict[str, Any] | None:
        if not value:
            return None
        try:
            data = json.loads(self._fernet.decrypt(value.encode(), ttl=max_age_s))
        except (InvalidToken, ValueError):
            return None
        return data if isinstance(data, dict) else None


@dataclass(frozen=True)
class OAuthClient:
    """The App's user authorization: its client id and secret, GitHub's web address, ours."""

    client_id: str
    client_secret: str
    github_url: str
    public_url: str

    @property
    def callback_url(self) -> str:
        return f"{self.public_url}/oauth/callback"

    def authorize_url(self, state: str) -> str:
        query = urlencode({"client_id": self.client_id, "redirect_uri": self.callback_url, "state": state})
        return f"{self.github_url}/login/oauth/authorize?{query}"

    async def exchange(self, session: aiohttp.ClientSession, code: str) -> str | None:
        """The viewer's token for the code GitHub sent back; None when GitHub refuses it."""
        form = {
            "client_id": self.client_id,
            "client_secret": self.client_secret,
            "code": code,
            "redirect_uri": self.callback_url,
        }
        async with session.post(
            f"{self.github_url}/login/oauth/access_token", data=form, headers={"Accept": "application/json"}
        ) as response:
            data = await response.json(content_type=None) if response.status == 200 else {}
        token = data.get("access_token") if isinstance(data, dict) else None
        if not isinstance(token, str) or not token:
            error = data.get("error") if isinstance(data, dict) else None
            log.warning("sign-in refused by GitHub", status=response.status, error=str(error)[:100])
            return None
        register_secret(token)
        return token

    async def revoke(self, session: aiohttp.ClientSession, api_url: str, token: str) -> bool:
        """Revoke a viewer's token at GitHub (signing out), so a copy of it is worthless too.
        ``DELETE /applications/{client_id}/token``, authenticated as the App's client (Basic)."""
        url = f"{api_url}/applications/{quote(self.client_id, safe='')}/token"
        headers = {
            "Accept": "application/vnd.github+json",
            "User-Agent": USER_AGENT,
            "Authorization": aiohttp.BasicAuth(self.client_id, self.client_secret).encode(),
        }
        try:
            async with session.delete(
                url, json={"access_token": token}, headers=headers, timeout=REVOKE_TIMEOUT
            ) as response:
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("viewer token not revoked", error=str(exc)[:200])
            return False
        if status in (204, 404):  # 404: GitHub knows no such token any more (expired, revoked)
            return True
        log.warning("viewer token not revoked", status=status)
        return False


def oauth_client(settings: Settings) -> OAuthClient | None:
    """The sign-in of the settings' App; None when its client id and secret are not given."""
    credentials = settings.viewer_sign_in()
    if credentials is None:
        return None
    if settings.public_url is None:
        raise SettingsError(
            "PARITYBOT_PUBLIC_URL: not set; viewers signing in are sent back to PUBLIC_URL/oauth/callback"
        )
    return OAuthClient(*credentials, settings.github_url, settings.public_url)
