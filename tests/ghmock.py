"""A gidgethub client that answers from canned responses and records every call: handler tests in
milliseconds, without a server.

As gidgethub's own tests do, :class:`MockGitHubAPI` subclasses :class:`gidgethub.abc.GitHubAPI` and
overrides ``_request``, so everything above it (URL templates, headers, JSON, pagination, error
mapping) is gidgethub's real code. Each request is first checked against GitHub's REST description
(``tests/fakegithub/spec.py``, the same check the fake GitHub makes): a request GitHub would refuse
fails the test here too.

Answers are looked up by method and path (``"GET /repos/o/r/pulls/7"``); without a canned answer a
write gets a plausible one (a new id for a POST, 204 for a DELETE) and a read gets 404, as GitHub
answers for something that does not exist.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fakegithub.spec import rest_spec
from gidgethub.abc import GitHubAPI


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    operation: str

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any = None


class MockGitHubAPI(GitHubAPI):
    def __init__(self, answers: Mapping[str, Any] | None = None) -> None:
        super().__init__("paritybot-tests", oauth_token="test-token")
        self.calls: list[Call] = []
        self._answers: dict[str, Answer] = {}
        self._ids = itertools.count(1000)
        for key, body in (answers or {}).items():
            self.answer(key, body)

    def answer(self, key: str, body: Any = None, *, status: int = 200) -> None:
        """Answer ``"METHOD /path"`` with ``body`` (JSON) and ``status`` from now on."""
        method, _, path = key.partition(" ")
        self._answers[f"{method.upper()} {path}"] = Answer(status, body)

    def called(self, method: str, path_prefix: str = "") -> list[Call]:
        """The calls made with ``method`` whose path starts with ``path_prefix``, in order."""
        return [c for c in self.calls if c.method == method and c.path.startswith(path_prefix)]

    def operations(self) -> list[str]:
        """The operations called, in order: ``checks/create``, ``issues/create-comment``…"""
        return [c.operation for c in self.calls]

    async def _request(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes = b""
    ) -> tuple[int, Mapping[str, str], bytes]:
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        data = json.loads(body) if body else None
        spec = rest_spec()
        match, _ = spec.match(method, parts.path)
        if match is None:
            raise AssertionError(f"{method} {parts.path}: no such operation in GitHub's REST API")
        errors = spec.query_errors(match.operation, query) + spec.body_errors(
            match.operation, data, bool(body)
        )
        if errors:
            raise AssertionError(f"{method} {parts.path}: GitHub would refuse this request: {errors}")
        self.calls.append(Call(method, parts.path, query, data, match.operation.operation_id))
        answer = self._answers.get(f"{method} {parts.path}") or self._default(
            method, match.operation.operation_id
        )
        payload = b"" if answer.body is None else json.dumps(answer.body).encode()
        response_headers = {"content-type": "application/json; charset=utf-8"} if payload else {}
        return answer.status, response_headers, payload

    def _default(self, method: str, operation_id: str) -> Answer:
        if operation_id == "checks/list-for-ref":
            return Answer(200, {"total_count": 0, "check_runs": []})  # a commit without check runs
        if method == "POST":
            return Answer(201, {"id": next(self._ids)})
        if method == "PATCH":
            return Answer(200, {})
        if method == "DELETE":
            return Answer(204)
        return Answer(404, {"message": "Not Found"})

    async def sleep(self, seconds: float) -> None:
        return None
