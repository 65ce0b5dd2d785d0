"""The service's own settings: environment variables ``PARITYBOT_*`` and an optional file.

These are the admin's settings (App id, key, secret, where the database is). The repository's
settings live in ``.github/paritybot.yml`` (see :mod:`bot.core.config`).

A little over 400 lines: every setting, its description and the checks that tie settings together
stay in one class, which `paritybot` and the deployment guide's table are read from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urlsplit, urlunsplit

from pydantic import Field, PrivateAttr, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from bot.service.github import RetryPolicy
from runner.backends.gpu_inventory import parse_selection

KEY_LINE_MIN_LEN = 16

# Settings renamed after a release: the old name is read for one more release, with a warning
# naming the new one (CHANGELOG.md, upgrade notes). Field → (its new field, the last release that
# reads it). Secrets are never given this grace: a secret as a value is refused instead.
RENAMED: dict[str, tuple[str, str]] = {
    "stale_after_s": ("stalled_after_s", "0.3.0"),
}


class SettingsError(Exception):
    """A setting is missing or invalid; the message names it in one line."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="PARITYBOT_",
        env_file=None,
        extra="forbid",
        validate_default=True,
    )

    app_id: int | None = Field(None, description="the GitHub App's id")
    private_key: SecretStr | None = Field(None, description="the App's PEM private key, as text")
    private_key_path: Path | None = Field(None, description="a file holding the App's PEM private key")
    webhook_secret: SecretStr | None = Field(None, description="the webhook secret set on the App")
    webhook_secret_file: Path | None = Field(
        None,
        description="a file holding the webhook secret (a container secret), so that it shows in no "
        "process environment and no `docker inspect`",
    )
    app_id_file: Path | None = Field(
        None, description="a file holding the App's id (the set-up page writes it there)"
    )
    client_id_file: Path | None = Field(
        None,
        description="a file holding the App's client id: viewers of private repositories sign in with it",
    )
    client_secret_file: Path | None = Field(
        None,
        description="a file holding the App's client secret (the sign-in's, and its session cookies' key)",
    )
    github_api_url: str = Field("https://api.github.com", description="REST API base URL (GHES: …/api/v3)")
    github_url: str = Field(
        "https://github.com", description="GitHub's web address, where viewers sign in (GHES: https://HOST)"
    )
    app_manifest: Path = Field(
        Path("deploy/app-manifest.yml"), description="the App's manifest the set-up page registers"
    )
    operator_token_file: Path | None = Field(
        None, description="a file holding the bearer token that /metrics and /status ask for"
    )
    operator_pages_public: bool = Field(
        False,
        description="true: /metrics and /status answer anyone (behind a network that only operators reach)",
    )
    viewer_access_ttl_s: float = Field(
        60.0, gt=0, le=3600, description="how long a viewer's read access to a repository is remembered"
    )
    database_url: str = Field("sqlite:///paritybot.db", description="sqlite:///PATH or postgresql://…")
    database_password_file: Path | None = Field(
        None,
        description="a file holding the password of the role that PARITYBOT_DATABASE_URL names "
        "(a container secret), so that the URL itself carries none",
    )
    runner: Literal["docker", "host"] = Field(
        "docker",
        description="docker: every run in a container of its environment's image, never on the host; "
        "host: trusted code on this machine, only with PARITYBOT_ALLOW_HOST_RUNNER=trusted-code-only",
    )
    allow_host_runner: Literal["trusted-code-only"] | None = Field(
        None,
        description="with runner=host: runs of PRs by trusted authors and of the default branch "
        "run on this machine, without a container; any other run is refused",
    )
    default_image: str | None = Field(
        None, description="the image of environments that name none; unset: such runs fail, saying so"
    )
    host: str = Field("0.0.0.0", description="bind address of `serve`")
    port: int = Field(8080, ge=1, le=65535)
    workers: int = Field(2, ge=1, le=64, description="runs executed at once by this process")
    gpus: str | None = Field(
        None,
        description="the GPUs this runner leases to runs (indexes or UUIDs, e.g. 0,1; none): unset, every GPU "
        "nvidia-smi lists; without nvidia-smi here (a remote engine, a containerised service) only these",
    )
    gpu_sharing: bool = Field(
        False, description="true: runs' GPU leases do not exclude each other (GPUs shared, e.g. under MPS)"
    )
    workspace_root: Path = Field(Path("/tmp/paritybot/workspaces"), description="where runs check out code")
    cache_root: Path = Field(Path("/tmp/paritybot/cache"), description="coverage maps, hook caches")
    max_attempts: int = Field(2, ge=1, le=10, description="tries of a job interrupted by a crash")
    delivery_lease_s: float = Field(
        120,
        gt=0,
        le=3600,
        description="several service replicas: a delivery being handled by a replica that died is taken "
        "by another after this long",
    )
    reconcile_interval_s: float = Field(
        60.0, gt=0, le=3600, description="how often the reconciler finishes on GitHub what is due"
    )
    heartbeat_s: float = Field(
        10.0,
        gt=0,
        le=300,
        description="how often a running job's worker (one machine) or an agent (several hosts) says it "
        "lives, and how often the reapers of several hosts look",
    )
    stalled_after_s: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="a running job whose worker or agent said nothing for this long is taken back (queued "
        "again, or failed past its attempts); an agent stops its runs itself two heartbeats earlier",
    )
    github_retry_attempts: int = Field(5, ge=1, le=20, description="tries of one GitHub request")
    github_retry_wait_s: float = Field(
        0.5, gt=0, le=60, description="the first backoff before a retry (then doubling, with jitter)"
    )
    github_rate_limit_wait_s: float = Field(
        60.0, ge=0, le=3600, description="the wait after a secondary rate limit that names no time"
    )
    github_max_wait_s: float = Field(
        300.0, ge=0, le=86400, description="a longer rate limit fails the request; what is due is sent later"
    )
    public_url: str | None = Field(
        None,
        pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$",
        description="where browsers reach `serve` (https://paritybot.example.org): every check run's "
        "Details link and the summary's link go to its run page there (unset, they are not sent); the "
        "sign-in's callback and the set-up page's App are made from it",
    )
    log_retention_days: float = Field(
        30.0,
        gt=0,
        le=3650,
        description="a run's log is kept this long after its last line (docs/run-page.md)",
    )
    log_format: Literal["json", "console"] = "json"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    stale_after_s: float | None = Field(None, description="renamed PARITYBOT_STALLED_AFTER_S")
    _renamed_used: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="after")
    def _old_names(self) -> Settings:
        # Defined first: the checks below see the value under its new name.
        for old, (new, last) in RENAMED.items():
            if getattr(self, old) is None:
                continue
            if new in self.model_fields_set:
                raise ValueError(
                    f"PARITYBOT_{old.upper()} is renamed PARITYBOT_{new.upper()}, which is set too: "
                    f"remove PARITYBOT_{old.upper()}"
                )
            setattr(self, new, getattr(self, old))
            setattr(self, old, None)
            self._renamed_used.append(
                f"PARITYBOT_{old.upper()} is renamed PARITYBOT_{new.upper()}: rename it in your settings; "
                f"paritybot {last} is the last release that reads the old name"
            )
        return self

    @field_validator("github_api_url", "github_url", "public_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not v.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return v.rstrip("/")

    @field_validator("runner", mode="before")
    @classmethod
    def _no_auto(cls, v: object) -> object:
        if v == "auto":
            raise ValueError(
                "'auto' is no longer accepted: it ran pull requests on this machine whenever the "
                "engine was unreachable; use docker (the default), or host with "
                "PARITYBOT_ALLOW_HOST_RUNNER=trusted-code-only"
            )
        return v

    @field_validator("gpus")
    @classmethod
    def _gpu_ids(cls, v: str | None) -> str | None:
        parse_selection(v)  # a ValueError names the empty entry
        return v if v is None or v.strip() else None

    @field_validator("allow_host_runner", "default_image", "public_url", mode="before")
    @classmethod
    def _empty_is_unset(cls, v: object) -> object:
        # Compose passes `${X:-}` as an empty string for a setting left out of .env.
        return None if v == "" else v

    @field_validator("database_url")
    @classmethod
    def _db(cls, v: str) -> str:
        if not v.startswith(("sqlite:///", "postgresql://", "postgres://")):
            raise ValueError("must be sqlite:///PATH or postgresql://…")
        return v

    @model_validator(mode="after")
    def _one_key(self) -> Settings:
        if self.private_key is not None and self.private_key_path is not None:
            raise ValueError("set PARITYBOT_PRIVATE_KEY or PARITYBOT_PRIVATE_KEY_PATH, not both")
        if self.stalled_after_s < 3 * self.heartbeat_s:
            raise ValueError(
                "PARITYBOT_STALLED_AFTER_S must be at least 3 × PARITYBOT_HEARTBEAT_S: a worker is "
                "given up only after missing several heartbeats, and an agent stops its runs two "
                "heartbeats before the reaper may give them away"
            )
        return self

    @model_validator(mode="after")
    def _secret_files(self) -> Settings:
        # Read once, at start-up: a missing or empty file stops the service with one line naming it.
        # Before the App exists (none of its files yet) there is nothing to read: `serve` offers
        # its set-up page instead (bot/service/setup.py).
        setting_up = self.awaiting_app_setup()
        if self.app_id_file is not None and not setting_up:
            if self.app_id is not None:
                raise SettingsError("PARITYBOT_APP_ID_FILE: PARITYBOT_APP_ID is set too; keep one")
            text = _read_secret("APP_ID_FILE", self.app_id_file)
            if not text.isdigit():
                raise SettingsError(f"PARITYBOT_APP_ID_FILE: {self.app_id_file} holds no App id (digits)")
            self.app_id = int(text)
        if self.webhook_secret_file is not None and not setting_up:
            if self.webhook_secret is not None:
                raise SettingsError(
                    "PARITYBOT_WEBHOOK_SECRET_FILE: PARITYBOT_WEBHOOK_SECRET is set too; keep one"
                )
            self.webhook_secret = SecretStr(_read_secret("WEBHOOK_SECRET_FILE", self.webhook_secret_file))
        if self.database_password_file is not None:
            self.database_url = _with_password(
                self.database_url, _read_secret("DATABASE_PASSWORD_FILE", self.database_password_file)
            )
        return self

    def app_files(self) -> dict[str, Path | None]:
        """Where the App's credentials are kept as files: what the set-up page writes."""
        return {
            "app_id": self.app_id_file,
            "private_key": self.private_key_path,
            "webhook_secret": self.webhook_secret_file,
            "client_id": self.client_id_file,
            "client_secret": self.client_secret_file,
        }

    def awaiting_app_setup(self) -> bool:
        """No App yet: no id, key or secret given, and none of their files exists."""
        given = (self.app_id, self.private_key, self.webhook_secret)
        files = self.app_files().values()
        return all(v is None for v in given) and not any(p is not None and p.exists() for p in files)

    def viewer_sign_in(self) -> tuple[str, str] | None:
        """The App's client id and secret, read from their files; None when sign-in is not set up."""
        if self.client_id_file is None or self.client_secret_file is None:
            return None
        return (
            _read_secret("CLIENT_ID_FILE", self.client_id_file),
            _read_secret("CLIENT_SECRET_FILE", self.client_secret_file),
        )

    def operator_token(self) -> str | None:
        """The bearer token /metrics and /status ask for; None: they answer nobody (or anyone,
        with PARITYBOT_OPERATOR_PAGES_PUBLIC)."""
        if self.operator_token_file is None:
            return None
        return _read_secret("OPERATOR_TOKEN_FILE", self.operator_token_file)

    def deprecation_warnings(self) -> list[str]:
        """One line per old setting name still in use, for the log's start."""
        return list(self._renamed_used)

    @property
    def is_postgres(self) -> bool:
        return self.database_url.startswith(("postgresql://", "postgres://"))

    @property
    def sqlite_path(self) -> Path:
        if self.is_postgres:
            raise SettingsError("PARITYBOT_DATABASE_URL: a PostgreSQL URL, not a SQLite file")
        return Path(self.database_url.removeprefix("sqlite:///"))

    def private_key_text(self) -> str:
        """The PEM text, read from the file when a path is given."""
        if self.private_key is not None:
            return self.private_key.get_secret_value()
        if self.private_key_path is None:
            raise SettingsError("PARITYBOT_PRIVATE_KEY or PARITYBOT_PRIVATE_KEY_PATH: not set")
        try:
            return self.private_key_path.read_text()
        except OSError as exc:
            raise SettingsError(
                f"PARITYBOT_PRIVATE_KEY_PATH: cannot read {self.private_key_path}: {exc.strerror}"
            ) from None

    def require_serving(self) -> None:
        """`serve` fails closed: no secret, no App credentials → no service."""
        if self.webhook_secret is None or not self.webhook_secret.get_secret_value():
            raise SettingsError("PARITYBOT_WEBHOOK_SECRET: not set; refusing to accept unsigned webhooks")
        if self.app_id is None:
            raise SettingsError("PARITYBOT_APP_ID: not set")
        key = self.private_key_text()
        if "PRIVATE KEY" not in key:
            raise SettingsError("PARITYBOT_PRIVATE_KEY: not a PEM private key")
        self._require_runner()

    def require_agent(self) -> None:
        """`agent` fails closed too: it needs PostgreSQL, and it must not be given the App's key."""
        if not self.is_postgres:
            raise SettingsError(
                "PARITYBOT_DATABASE_URL: an agent needs the PostgreSQL of the service (postgresql://…)"
            )
        if self.private_key is not None or self.private_key_path is not None:
            raise SettingsError(
                "PARITYBOT_PRIVATE_KEY: set for an agent; agents never hold the App's private key "
                "(the service hands them a token per run): remove it from the agent's settings"
            )
        if self.webhook_secret is not None:
            raise SettingsError("PARITYBOT_WEBHOOK_SECRET: set for an agent, which never needs it: remove it")
        if self.runner == "host":
            # What a host step leaves running can only be found and killed by the process that
            # recorded it; an agent killed mid-run hands its job to another host, so it must not
            # leave processes on this one. Containers are found by label on any restart.
            raise SettingsError(
                "PARITYBOT_RUNNER=host: agents run jobs in containers only; the host runner is "
                "for one machine (serve with SQLite)"
            )

    def _require_runner(self) -> None:
        if self.runner == "host" and self.allow_host_runner != "trusted-code-only":
            raise SettingsError(
                "PARITYBOT_RUNNER=host: refusing to start without "
                "PARITYBOT_ALLOW_HOST_RUNNER=trusted-code-only (the host runner gives the code it "
                "runs this machine's files, network and the service's rights)"
            )

    def retry_policy(self) -> RetryPolicy:
        wait = self.github_retry_wait_s
        return RetryPolicy(
            attempts=self.github_retry_attempts,
            timeout_s=max(120.0, self.github_max_wait_s),
            wait_initial_s=wait,
            wait_max_s=60 * wait,
            wait_jitter_s=2 * wait,
            rate_limit_wait_s=self.github_rate_limit_wait_s,
            max_wait_s=self.github_max_wait_s,
        )

    def service_secrets(self) -> tuple[str, ...]:
        """Values no run's output may show: the webhook secret, the private key and its lines."""
        secrets = [self.webhook_secret.get_secret_value()] if self.webhook_secret else []
        try:
            key = self.private_key_text()
        except SettingsError:
            key = ""
        if key.strip():
            # A key printed in pieces is still a key: each of its lines is a secret too (a short
            # last line is left out, so ordinary text is not blanked out).
            lines = (line.strip() for line in key.splitlines() if "-----" not in line)
            secrets += [key.strip(), *(line for line in lines if len(line) >= KEY_LINE_MIN_LEN)]
        return tuple(s for s in secrets if s)


def _read_secret(name: str, path: Path) -> str:
    try:
        value = path.read_text().strip()  # `echo secret > file` leaves a newline that is no part of it
    except OSError as exc:
        raise SettingsError(f"PARITYBOT_{name}: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise SettingsError(f"PARITYBOT_{name}: {path} is not text") from None
    if not value:
        raise SettingsError(f"PARITYBOT_{name}: {path} is empty")
    return value


def _with_password(url: str, password: str) -> str:
    """The database URL with the role's password put in, escaped as a URL needs it."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise SettingsError(
            "PARITYBOT_DATABASE_PASSWORD_FILE: only a postgresql:// database takes a password"
        )
    if parts.password is not None:
        raise SettingsError(
            "PARITYBOT_DATABASE_PASSWORD_FILE: PARITYBOT_DATABASE_URL holds a password already; keep one"
        )
    if not parts.username:
        raise SettingsError(
            "PARITYBOT_DATABASE_PASSWORD_FILE: PARITYBOT_DATABASE_URL names no role (postgresql://ROLE@…)"
        )
    user, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user}:{quote(password, safe='')}@{host}"))


def load_settings(env_file: Path | None = None, **overrides: Any) -> Settings:
    """Build the settings, turning pydantic's errors into one line that names the variable."""
    try:
        if env_file is not None:
            if not env_file.is_file():
                raise SettingsError(f"settings file {env_file}: not found")
            return Settings(_env_file=env_file, **overrides)
        return Settings(**overrides)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = "_".join(str(p) for p in err["loc"]).upper()
        where = f"PARITYBOT_{name}" if name else "settings"
        raise SettingsError(f"{where}: {err['msg']}") from None
