"""GitHub App authentication as GitHub does it: an RS256 app JWT, then installation tokens."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

# GitHub refuses app JWTs that live longer than ten minutes and tolerates a minute of clock drift.
MAX_JWT_LIFETIME_S = 600
CLOCK_DRIFT_S = 60


class AuthError(Exception):
    """A credential GitHub would answer with 401; the message is GitHub's."""


@dataclass
class InstallationToken:
    token: str
    installation_id: int
    expires_at: datetime
    repositories: frozenset[str] | None  # None: every repository of the installation
    permissions: dict[str, str] | None = None  # None: every permission the App has


@dataclass(frozen=True)
class AppKeys:
    private_key_pem: str
    public_key_pem: str

    @classmethod
    def generate(cls) -> AppKeys:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        private = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        public = (
            key.public_key()
            .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
            .decode()
        )
        return cls(private, public)


def verify_app_jwt(token: str, *, public_key_pem: str, app_id: int, now: datetime) -> None:
    """Raise :class:`AuthError` unless ``token`` is an app JWT GitHub would accept at ``now``."""
    try:
        claims = jwt.decode(
            token,
            public_key_pem,
            algorithms=["RS256"],
            options={"require": ["iat", "exp", "iss"], "verify_exp": False, "verify_iat": False},
        )
    except jwt.PyJWTError as exc:
        raise AuthError(f"A JSON web token could not be decoded ({exc})") from exc
    iat, exp, iss = claims["iat"], claims["exp"], claims["iss"]
    if not isinstance(iat, int | float) or not isinstance(exp, int | float):
        raise AuthError("'Issued at' and 'Expiration time' claims must be numeric")
    if str(iss) != str(app_id):
        raise AuthError(f"'Issuer' claim ('iss') must be the app id {app_id}, got {iss!r}")
    stamp = now.timestamp()
    if iat > stamp + CLOCK_DRIFT_S:
        raise AuthError("'Issued at' claim ('iat') must be an Integer representing a time in the past")
    if exp <= stamp:
        raise AuthError("'Expiration time' claim ('exp') must be a numeric value in the future")
    if exp - iat > MAX_JWT_LIFETIME_S or exp > stamp + MAX_JWT_LIFETIME_S + CLOCK_DRIFT_S:
        raise AuthError("'Expiration time' claim ('exp') is too far in the future")


def new_installation_token(
    installation_id: int,
    *,
    now: datetime,
    ttl: timedelta,
    repositories: frozenset[str] | None,
    permissions: dict[str, str] | None = None,
) -> InstallationToken:
    # `ghs_` + 36 characters is the shape of GitHub's installation tokens.
    token = "ghs_" + secrets.token_hex(18)
    return InstallationToken(token, installation_id, now + ttl, repositories, permissions)


_LEVELS = {"read": 1, "write": 2, "admin": 3}

# What each operation the fake serves needs of an installation token (GitHub's "permissions
# required for GitHub Apps"); metadata read comes with every token.
OPERATION_PERMISSIONS: dict[str, tuple[str, str]] = {
    "pulls/get": ("pull_requests", "read"),
    "pulls/list-files": ("pull_requests", "read"),
    "repos/list-pull-requests-associated-with-commit": ("pull_requests", "read"),
    "repos/get-content": ("contents", "read"),
    "issues/list-comments": ("issues", "read"),
    "issues/get-comment": ("issues", "read"),
    "issues/create-comment": ("issues", "write"),
    "issues/update-comment": ("issues", "write"),
    "issues/delete-comment": ("issues", "write"),
    "reactions/create-for-issue-comment": ("issues", "write"),
    "reactions/list-for-issue-comment": ("issues", "read"),
    "checks/create": ("checks", "write"),
    "checks/update": ("checks", "write"),
    "checks/get": ("checks", "read"),
    "checks/list-annotations": ("checks", "read"),
    "checks/list-for-ref": ("checks", "read"),
    "repos/get-collaborator-permission-level": ("metadata", "read"),
    "teams/get-membership-for-user-in-org": ("members", "read"),
}


def grants(held: dict[str, str], name: str, level: str) -> bool:
    """Whether ``held`` permissions include ``name`` at ``level`` or above."""
    if name == "metadata" and level == "read":
        return True
    return _LEVELS.get(held.get(name, ""), 0) >= _LEVELS[level]
