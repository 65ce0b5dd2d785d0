"""`paritybot repro`'s first step: which run the user means, and that run's record from the service.

``RUN`` is a run page (``https://ci.example/runs/<id>``), its JSON (``…/runs/<id>.json``), a pull
request (``https://github.com/owner/repo/pull/7``) or ``owner/repo#7``; the last two name the PR's
latest run, which the service serves at ``/repos/<owner>/<repo>/pulls/<n>/latest.json`` (so they
need the service's address: ``--server`` or ``PARITYBOT_SERVER``). The viewer's GitHub token goes
with the request, for a private repository's runs.

The record is read leniently (:class:`ReproRecord` keeps only what a repro needs and ignores fields
added later, which never raise the schema version), but a record of a newer schema version than
this client knows is refused: a field it relies on may mean something else there.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.cli.checkout import UsageError
from bot.core.models import EnvFacts
from bot.render.run_record import SCHEMA_VERSION

MAX_RECORD_BYTES = 50_000_000
_RUN_PATH = re.compile(r"^(?P<prefix>.*)/runs/(?P<id>[A-Za-z0-9_-]{1,64})(?:\.json)?/?$")
_PR_URL = re.compile(r"^https?://[^/]+/(?P<owner>[\w.-]+)/(?P<repo>[\w.-]+)/pull/(?P<n>\d+)(?:/.*)?$")
_PR_SHORT = re.compile(r"^(?P<owner>[\w.-]+)/(?P<repo>[\w.-]+)#(?P<n>\d+)$")
TOKEN_HINT = "give your GitHub token with --token-file FILE or GITHUB_TOKEN"


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ReproEnvironment(_Lenient):
    name: str
    runner: str = ""
    image: str | None = None
    image_ref: str | None = None
    gpus: str | int | list[str] = "none"
    setup: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    env_hidden: list[str] = Field(default_factory=list)
    user: str | None = None
    memory: str | None = None
    shm_size: str | None = None
    networked_steps: list[str] = Field(default_factory=list)
    probe: EnvFacts | None = None


class ReproTest(_Lenient):
    nodeid: str
    outcome: str
    message: str = ""
    traceback: str = ""


class ReproRecord(_Lenient):
    """What `repro` reads of a run's record (docs/run-page.md describes every field)."""

    schema_version: int
    id: str
    url: str | None = None
    repository: str
    clone_url: str
    private: bool | None = None
    pr_number: int | None = None
    head_sha: str = Field(pattern=r"^[0-9a-fA-F]{7,64}$")
    base_ref: str | None = None
    base_sha: str | None = None
    merged: bool = False
    environment: ReproEnvironment
    failing_tests: list[ReproTest] = Field(default_factory=list)
    pytest_args: list[str] = Field(default_factory=list)


def record_url(run: str, server: str | None) -> str:
    """The JSON URL of the run ``run`` names; a UsageError saying what RUN may be otherwise."""
    run = run.strip()
    if run.startswith(("http://", "https://")) and (
        m := _RUN_PATH.match(urlsplit(run)._replace(query="").geturl())
    ):
        return f"{m['prefix']}/runs/{m['id']}.json"
    pr = _PR_URL.match(run) or _PR_SHORT.match(run)
    if pr is None:
        raise UsageError(
            f"{run!r} is not a run: give a run page URL (…/runs/ID), its JSON URL, a pull request URL "
            "or owner/repo#N"
        )
    if not server:
        raise UsageError(
            f"{run} names a pull request: say which paritybot serves it with --server URL or PARITYBOT_SERVER"
        )
    return f"{server.rstrip('/')}/repos/{pr['owner']}/{pr['repo']}/pulls/{pr['n']}/latest.json"


def fetch_record(url: str, token: str | None, *, timeout_s: float = 30.0) -> ReproRecord:
    """The record at ``url``; a UsageError that says why not (unknown run, private, too new)."""
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    if token:
        request.add_unredirected_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read(MAX_RECORD_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise UsageError(_http_refusal(url, exc.code, token)) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UsageError(f"could not reach {url}: {reason}") from None
    if len(body) > MAX_RECORD_BYTES:
        raise UsageError(f"{url}: the record is larger than {MAX_RECORD_BYTES // 1_000_000} MB; not read")
    return parse_record(body, url, token_sent=bool(token))


def _http_refusal(url: str, status: int, token: str | None) -> str:
    if status in (401, 403, 404) and not token:
        return (
            f"{url}: no such run, or a private repository's run (HTTP {status}); "
            f"for a private repository, {TOKEN_HINT}"
        )
    if status in (401, 403, 404):
        return f"{url}: no such run, or your GitHub token may not read its repository (HTTP {status})"
    return f"{url}: the service answered HTTP {status}"


def parse_record(body: bytes, where: str, *, token_sent: bool) -> ReproRecord:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise UsageError(f"{where}: not a run record (not JSON)") from None
    if not isinstance(data, dict) or not isinstance(data.get("schema_version"), int):
        raise UsageError(f"{where}: not a run record (no schema_version)")
    version = data["schema_version"]
    if version > SCHEMA_VERSION:
        raise UsageError(
            f"{where}: the record's schema version is {version}, newer than this paritybot reads "
            f"({SCHEMA_VERSION}); upgrade paritybot"
        )
    try:
        record = ReproRecord.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise UsageError(
            f"{where}: not a run record this paritybot reads ({field}: {first['msg']})"
        ) from None
    if record.private is not False and not token_sent:
        # A service whose gate lets anyone see private runs still should not make us the leak.
        raise UsageError(f"{where}: the run is of a private repository ({record.repository}); {TOKEN_HINT}")
    return record


def read_token(token_file: str | None, environ: dict[str, str]) -> str | None:
    if token_file is not None:
        try:
            with open(token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as exc:
            raise UsageError(f"--token-file {token_file}: {exc.strerror}") from None
        if not token:
            raise UsageError(f"--token-file {token_file}: the file is empty")
        return token
    return environ.get("GITHUB_TOKEN") or None


def pick_test(record: ReproRecord, nodeid: str | None) -> ReproTest:
    """The test to rerun: ``--test``, else the run's only (or first) failing test."""
    if nodeid is not None:
        for test in record.failing_tests:
            if test.nodeid == nodeid:
                return test
        return ReproTest(nodeid=nodeid, outcome="unknown")
    if not record.failing_tests:
        raise UsageError(f"run {record.id} has no failing test; name one with --test NODEID")
    return record.failing_tests[0]
