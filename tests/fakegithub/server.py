"""The fake GitHub: a real HTTP server on loopback that checks every request against GitHub's
REST description, authenticates like GitHub, keeps state, and lets tests seed, inspect and break it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from . import auth, handlers, render, user_api
from .spec import rest_spec
from .state import (
    ROLE_PERMISSION,
    Call,
    CheckRun,
    Comment,
    InjectedFailure,
    Installation,
    PullFile,
    PullRequest,
    Reaction,
    Repo,
    Violation,
)
from .web import WebSide

_ID_BASES = {
    "comment": 1_200_000_000,
    "check_run": 20_000_000_000,
    "reaction": 300_000_000,
    "pull": 1_800_000_000,
}


class FakeGitHub:
    """A stateful stand-in for api.github.com. Start it, point the bot's ``base_url`` at ``.url``."""

    def __init__(
        self,
        *,
        app_id: int = 424242,
        app_slug: str = "paritybot",
        app_name: str = "ParityBot",
        app_owner: str = "paritybot-dev",
        token_ttl: timedelta = timedelta(hours=1),
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.app_id = app_id
        self.app_slug = app_slug
        self.app_name = app_name
        self.app_owner = app_owner
        self.token_ttl = token_ttl  # lifetime of installation tokens issued from now on
        self._clock = clock or (lambda: datetime.now(UTC))
        self._keys = auth.AppKeys.generate()
        self.url = ""
        self.installations: dict[int, Installation] = {}
        self.repos: dict[str, Repo] = {}  # lower-case full name -> repo
        self.tokens: dict[str, auth.InstallationToken] = {}
        self.teams: dict[tuple[str, str], dict[str, tuple[str, str]]] = {}
        self.all_comments: dict[int, Comment] = {}
        self.runs: dict[int, CheckRun] = {}
        self.calls: list[Call] = []
        self._latency: dict[tuple[str, str], float] = {}
        self.violations: list[Violation] = []
        self._expected: list[str] = []
        self._failures: list[InjectedFailure] = []
        self._ids = {kind: itertools.count(base) for kind, base in _ID_BASES.items()}
        self._runner: web.AppRunner | None = None
        self._spec = rest_spec()
        self.web = WebSide(self)  # the github.com side: sign-in, registering an App
        self.webhook_secret: str | None = None  # set when an App is registered from a manifest

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application(client_max_size=32 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        await self.web.start()

    async def close(self) -> None:
        await self.web.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeGitHub:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # --- identity -------------------------------------------------------------------------

    @property
    def private_key_pem(self) -> str:
        """The app's private key, PEM: configure the bot with it (and :attr:`app_id`)."""
        return self._keys.private_key_pem

    @property
    def public_key_pem(self) -> str:
        return self._keys.public_key_pem

    @property
    def bot_login(self) -> str:
        return f"{self.app_slug}[bot]"

    @property
    def site(self) -> render.Site:
        return render.Site(self.url, self.app_id, self.app_slug, self.app_name, self.app_owner)

    def now(self) -> datetime:
        return self._clock()

    @staticmethod
    def parse_time(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    def next_id(self, kind: str) -> int:
        return next(self._ids[kind])

    # --- seeding --------------------------------------------------------------------------

    def add_installation(
        self, installation_id: int, account: str, *, account_type: str = "Organization"
    ) -> Installation:
        inst = Installation(installation_id, account, account_type)
        self.installations[installation_id] = inst
        return inst

    def add_repo(
        self,
        full_name: str,
        *,
        installation_id: int = 1,
        default_branch: str = "main",
        private: bool = False,
        clone_url: str | None = None,
    ) -> Repo:
        """A repository the app is installed on (the installation is created if new).

        ``clone_url`` replaces the github.com one in rendered PRs, so the bot can fetch real code.
        """
        owner, name = full_name.split("/", 1)
        if installation_id not in self.installations:
            self.add_installation(installation_id, owner)
        repo = Repo(owner, name, render.stable_id(full_name), installation_id, default_branch, private)
        repo.clone_url = clone_url
        self.repos[full_name.lower()] = repo
        return repo

    def find_repo(self, full_name: str) -> Repo | None:
        return self.repos.get(full_name.lower())

    def _repo(self, full_name: str) -> Repo:
        repo = self.find_repo(full_name)
        if repo is None:
            raise KeyError(f"no repository {full_name!r}: seed it with add_repo() first")
        return repo

    def add_pull(
        self,
        full_name: str,
        number: int,
        *,
        head_sha: str,
        author: str = "octo-contrib",
        author_association: str = "CONTRIBUTOR",
        title: str = "Improve things",
        body: str | None = None,
        head_ref: str = "feature",
        base_ref: str | None = None,
        base_sha: str = "0" * 40,
        head_repo: str | bool | None = True,
        draft: bool = False,
        labels: Iterable[str] = (),
        files: Iterable[PullFile | str] = (),
        state: str = "open",
    ) -> PullRequest:
        """A pull request. ``head_repo``: True = same repository, a full name = a fork, None = the
        fork was deleted. ``files``: PullFile entries or bare file names (modified, +1)."""
        repo = self._repo(full_name)
        pr = PullRequest(
            number=number,
            title=title,
            body=body,
            author=author,
            author_association=author_association,
            head_sha=head_sha,
            head_ref=head_ref,
            base_ref=base_ref or repo.default_branch,
            base_sha=base_sha,
            head_repo=repo.full_name if head_repo is True else (head_repo or None),
            draft=draft,
            labels=list(labels),
            state=state,
            id=self.next_id("pull"),
            created_at=self.now(),
        )
        repo.pulls[number] = pr
        self.set_pull_files(full_name, number, files)
        return pr

    def set_pull_files(self, full_name: str, number: int, files: Iterable[PullFile | str]) -> None:
        pr = self._repo(full_name).pulls[number]
        pr.files = [f if isinstance(f, PullFile) else PullFile(f) for f in files]

    def set_file(self, full_name: str, path: str, content: str | bytes, *, ref: str | None = None) -> None:
        """A file at ``ref`` (a branch name or a sha; default: the default branch)."""
        repo = self._repo(full_name)
        data = content.encode() if isinstance(content, str) else content
        repo.files.setdefault(ref or repo.default_branch, {})[path.strip("/")] = data

    def set_role(self, full_name: str, login: str, role: str) -> None:
        """A collaborator's role: admin, maintain, write, triage, read or none."""
        if role not in ROLE_PERMISSION:
            raise ValueError(f"unknown role {role!r}; expected one of {sorted(ROLE_PERMISSION)}")
        self._repo(full_name).roles[login.lower()] = role

    def add_team_member(
        self, org: str, team_slug: str, login: str, *, role: str = "member", state: str = "active"
    ) -> None:
        self.teams.setdefault((org.lower(), team_slug.lower()), {})[login.lower()] = (role, state)

    def add_comment(
        self,
        full_name: str,
        issue_number: int,
        body: str,
        *,
        user: str = "octo-contrib",
        author_association: str = "CONTRIBUTOR",
        user_type: str = "User",
    ) -> Comment:
        """A comment on a pull request, as if ``user`` had posted it."""
        repo = self._repo(full_name)
        if issue_number not in repo.pulls:
            raise KeyError(f"no pull request #{issue_number} in {full_name}: seed it with add_pull()")
        now = self.now()
        comment = Comment(
            id=self.next_id("comment"),
            repo=repo.full_name,
            issue_number=issue_number,
            body=body,
            user=user,
            user_type=user_type,
            author_association=author_association,
            created_at=now,
            updated_at=now,
            bodies=[body],
        )
        self.all_comments[comment.id] = comment
        return comment

    def add_check_run(
        self,
        full_name: str,
        head_sha: str,
        name: str,
        *,
        external_id: str | None = None,
        status: str = "in_progress",
    ) -> CheckRun:
        """A check run of this App already on the commit (left by an earlier process, say)."""
        repo = self._repo(full_name)
        run = CheckRun(
            id=self.next_id("check_run"),
            repo=repo.full_name,
            head_sha=head_sha,
            name=name,
            status=status,
            conclusion=None,
            started_at=self.now(),
            completed_at=None,
            external_id=external_id,
        )
        body = {"name": name, "head_sha": head_sha, "status": status} | (
            {"external_id": external_id} if external_id else {}
        )
        run.updates.append(body)
        run.states.append(render.check_run(self.site, run, []))
        self.runs[run.id] = run
        return run

    def issue_token(
        self,
        installation_id: int = 1,
        *,
        ttl: timedelta | None = None,
        repositories: Iterable[str] | None = None,
        permissions: dict[str, str] | None = None,
    ) -> auth.InstallationToken:
        """An installation token, as ``POST /app/installations/{id}/access_tokens`` would issue."""
        names = None if repositories is None else frozenset(r.lower() for r in repositories)
        token = auth.new_installation_token(
            installation_id,
            now=self.now(),
            ttl=ttl if ttl is not None else self.token_ttl,
            repositories=names,
            permissions=permissions,
        )
        self.tokens[token.token] = token
        return token

    # --- reading state --------------------------------------------------------------------

    def comments(self, full_name: str, issue_number: int) -> list[Comment]:
        """Comments on the pull request, oldest first, without deleted ones."""
        return [
            c
            for c in self.all_comments.values()
            if c.repo.lower() == full_name.lower() and c.issue_number == issue_number and not c.deleted
        ]

    def live_comment(self, comment_id: int) -> Comment | None:
        comment = self.all_comments.get(comment_id)
        return None if comment is None or comment.deleted else comment

    def comment(self, comment_id: int) -> Comment:
        return self.all_comments[comment_id]

    def reactions(self, comment_id: int) -> list[Reaction]:
        return list(self.all_comments[comment_id].reactions)

    def check_runs(
        self, full_name: str | None = None, *, head_sha: str | None = None, name: str | None = None
    ) -> list[CheckRun]:
        """Check runs, oldest first; each keeps ``updates`` (bodies) and ``states`` (responses)."""
        return [
            r
            for r in self.runs.values()
            if (full_name is None or r.repo.lower() == full_name.lower())
            and head_sha in (None, r.head_sha)
            and name in (None, r.name)
        ]

    def check_run(self, run_id: int) -> CheckRun:
        return self.runs[run_id]

    def calls_to(self, method: str, path: str) -> list[Call]:
        """Requests with this method to a concrete path or to a description template
        (``/repos/{owner}/{repo}/check-runs``)."""
        out = []
        for call in self.calls:
            if call.method != method.upper():
                continue
            template = self._spec.by_id[call.operation_id].template if call.operation_id else None
            if path in (call.path, template):
                out.append(call)
        return out

    # --- faults and expectations ----------------------------------------------------------

    def slow(self, method: str, template: str, seconds: float) -> None:
        """Answer requests of ``method`` to ``template`` (the description's path) ``seconds`` after
        reading the state: a slow GitHub widens the windows in which concurrent writers interleave."""
        self._latency[(method, template)] = seconds

    def fail(
        self,
        method: str,
        path: str,
        status: int = 500,
        *,
        times: int = 1,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        after: bool = False,
    ) -> None:
        """Answer the next ``times`` matching requests with ``status`` (path: concrete or template).

        ``after``: carry each request out first, then answer with the failure, as a gateway that
        times out after GitHub did the work does: the client cannot tell whether it happened."""
        payload = (
            body
            if body is not None
            else {"message": f"Injected failure {status}", "documentation_url": handlers.DOCS}
        )
        self._failures.append(
            InjectedFailure(method.upper(), path, status, times, payload, dict(headers or {}), after)
        )

    def clear_failures(self) -> None:
        """GitHub recovers: no injected failure is left."""
        self._failures.clear()

    def expect_violation(self, match: str = "") -> None:
        """Declare that this test sends one request GitHub would refuse (its message contains ``match``)."""
        self._expected.append(match)

    def check_violations(self) -> None:
        """Raise AssertionError for violations nobody expected, or expected ones that never came."""
        pending = list(self._expected)
        unexpected = []
        for v in self.violations:
            text = str(v)
            hit = next((m for m in pending if m in text), None)
            if hit is None:
                unexpected.append(text)
            else:
                pending.remove(hit)
        problems = [f"request GitHub would refuse: {t}" for t in unexpected]
        problems += [f"expected a violation matching {m!r}, none happened" for m in pending]
        if problems:
            raise AssertionError("fake GitHub:\n  " + "\n  ".join(problems))

    # --- HTTP -----------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        raw_path = request.raw_path.split("?", 1)[0]
        raw_body = await request.read()
        call = Call(
            method=request.method,
            path=unquote(raw_path),
            query={k: v for k, v in request.query.items()},
            json=None,
            headers=dict(request.headers),
            at=time.monotonic(),
        )
        self.calls.append(call)
        response = await self._answer(request, raw_path, raw_body, call)
        for key, value in self._standard_headers().items():
            response.headers.setdefault(key, value)  # an injected failure's own headers stay
        call.status = response.status
        return response

    def _standard_headers(self) -> dict[str, str]:
        reset = int((self.now() + timedelta(hours=1)).timestamp())
        return {
            "X-GitHub-Media-Type": "github.v3; format=json",
            "X-GitHub-Request-Id": secrets.token_hex(8).upper(),
            "X-RateLimit-Limit": "5000",
            "X-RateLimit-Remaining": str(max(0, 5000 - len(self.calls))),
            "X-RateLimit-Reset": str(reset),
            "X-RateLimit-Used": str(len(self.calls)),
        }

    def _violation(self, kind: str, call: Call, op_id: str | None, errors: list[str]) -> None:
        self.violations.append(Violation(kind, call.method, call.path, op_id, errors))

    async def _answer(self, request: web.Request, raw_path: str, raw_body: bytes, call: Call) -> web.Response:
        match, path_known = self._spec.match(request.method, raw_path)
        if match is None:
            kind = "method-not-allowed" if path_known else "unknown-path"
            self._violation(kind, call, None, ["GitHub's REST description has no such operation"])
            return handlers.respond({"message": "Not Found", "documentation_url": handlers.DOCS}, 404)
        op = match.operation
        call.operation_id = op.operation_id
        body, errors = self._parse_body(raw_body)
        call.json = body
        if not errors:
            multi = {k: request.query.getall(k) for k in request.query}
            errors = self._spec.query_errors(op, multi) + self._spec.body_errors(op, body, bool(raw_body))
        if errors:
            self._violation("invalid-request", call, op.operation_id, errors)
            message = "Invalid request.\n\n" + "\n".join(errors)
            return handlers.respond(
                {"message": message, "errors": errors, "documentation_url": handlers.DOCS}, 422
            )
        failure = self._take_failure(call, op.template)
        if failure is not None and not failure.after:
            call.carried_out = False
            return handlers.respond(failure.body, failure.status, failure.headers)
        handler = handlers.HANDLERS.get(op.operation_id) or user_api.HANDLERS.get(op.operation_id)
        if handler is None:
            self._violation("unimplemented", call, op.operation_id, ["the fake does not implement it"])
            return handlers.respond({"message": f"{op.operation_id} is not implemented by the fake"}, 501)
        try:
            ctx = self._context(request, match.params, body, op.operation_id)
            answer = await handler(ctx)
            # The answer leaves late, as read when the request came: what a slow GitHub shows.
            await asyncio.sleep(self._latency.get((call.method, op.template), 0.0))
            if failure is not None:  # carried out; the answer is lost on the way back
                return handlers.respond(failure.body, failure.status, failure.headers)
            return answer
        except auth.AuthError as exc:
            return handlers.respond({"message": str(exc), "documentation_url": handlers.DOCS}, 401)
        except handlers.GitHubError as exc:
            if exc.refusal:
                self._violation("invalid-request", call, op.operation_id, [exc.message])
            return handlers.respond({"message": exc.message, "documentation_url": handlers.DOCS}, exc.status)
        except Exception as exc:
            # A fault in the fake itself must fail the test, not pass for a GitHub outage.
            self._violation("fake-error", call, op.operation_id, [f"{type(exc).__name__}: {exc}"])
            return handlers.respond({"message": "fake GitHub failed; see its violations"}, 500)

    @staticmethod
    def _parse_body(raw: bytes) -> tuple[Any, list[str]]:
        if not raw:
            return None, []
        try:
            return json.loads(raw), []
        except (ValueError, UnicodeDecodeError) as exc:
            return None, [f"Problems parsing JSON: {exc}"]

    def _take_failure(self, call: Call, template: str) -> InjectedFailure | None:
        for failure in self._failures:
            if (
                failure.remaining > 0
                and failure.method in (call.method, "*")
                and failure.path in (call.path, template)
            ):
                failure.remaining -= 1
                return failure
        return None

    def _context(self, request: web.Request, params: dict[str, str], body: Any, op_id: str) -> handlers.Ctx:
        scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
        credential = credential.strip()
        ctx = handlers.Ctx(self, request, params, dict(request.query), body, None, None)
        if op_id in user_api.UNAUTHENTICATED:
            return ctx
        if op_id in user_api.CLIENT_CREDENTIALS:
            # GitHub: "You must use Basic Authentication … using the client_id and client_secret
            # of the GitHub App"; a token is refused.
            if not self.web.client_authenticates(request.headers.get("Authorization", "")):
                self._violation(
                    "invalid-request", self.calls[-1], op_id, ["not the App's client id and secret"]
                )
                raise auth.AuthError("Requires authentication")
            return ctx
        if scheme.lower() not in ("bearer", "token") or not credential:
            raise auth.AuthError("Requires authentication")
        ctx.user_login = self.web.find_user(credential)
        if ctx.user_login is not None:
            return ctx
        if op_id in handlers.JWT_OPERATIONS:
            if scheme.lower() != "bearer":
                raise auth.AuthError("A JSON web token could not be decoded")
            auth.verify_app_jwt(
                credential, public_key_pem=self.public_key_pem, app_id=self.app_id, now=self.now()
            )
            return ctx
        token = self.tokens.get(credential)
        if token is None or token.expires_at <= self.now():
            raise auth.AuthError("Bad credentials")
        ctx.installation_id = token.installation_id
        ctx.token_repos = token.repositories
        if token.permissions is not None:
            needed = auth.OPERATION_PERMISSIONS.get(op_id)
            if needed is None or not auth.grants(token.permissions, *needed):
                raise handlers.GitHubError(403, "Resource not accessible by integration")
        return ctx
