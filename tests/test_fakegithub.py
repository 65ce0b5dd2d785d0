"""The fake GitHub behaves like api.github.com for a real client (gidgethub over loopback HTTP),
and refuses, records and reports every request GitHub's REST description would refuse."""

from __future__ import annotations

import base64
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
from fakegithub import FakeGitHub, PullFile, rest_spec
from fakegithub.auth import AppKeys
from gidgethub import BadRequest, GitHubBroken, ValidationError
from gidgethub.aiohttp import GitHubAPI
from gidgethub.apps import get_installation_access_token, get_jwt

REPO = "acme/widgets"
SHA = "9f2c1e7b5a3d4c6e8f0a1b2c3d4e5f60718293a4"


@dataclass
class Client:
    gh: GitHubAPI
    token: str
    session: aiohttp.ClientSession

    async def raw(self, method: str, path: str, **kwargs: Any) -> tuple[int, dict[str, str], Any]:
        """A request outside gidgethub, to see status and headers as sent."""
        headers = {"Authorization": f"token {self.token}", **kwargs.pop("headers", {})}
        async with self.session.request(method, self.gh.base_url + path, headers=headers, **kwargs) as resp:
            body = (
                await resp.json() if resp.content_type == "application/json" and resp.status != 204 else None
            )
            return resp.status, dict(resp.headers), body


@pytest.fixture
async def client(fake_github: FakeGitHub) -> AsyncIterator[Client]:
    """An installation-authenticated gidgethub client on a seeded repository with PR #7."""
    fake_github.add_repo(REPO, installation_id=11)
    fake_github.add_pull(REPO, 7, head_sha=SHA, author="alice", files=["src/a.py", "tests/test_a.py"])
    async with aiohttp.ClientSession() as session:
        gh = GitHubAPI(session, "paritybot-tests", base_url=fake_github.url)
        token = await get_installation_access_token(
            gh, installation_id="11", app_id=str(fake_github.app_id), private_key=fake_github.private_key_pem
        )
        yield Client(gh, token["token"], session)


def _annotation(i: int) -> dict[str, Any]:
    return {
        "path": "src/a.py",
        "start_line": i,
        "end_line": i,
        "annotation_level": "warning",
        "message": f"m{i}",
    }


async def test_app_flow_from_jwt_to_check_run(fake_github: FakeGitHub, client: Client) -> None:
    gh, token = client.gh, client.token
    app_jwt = get_jwt(app_id=str(fake_github.app_id), private_key=fake_github.private_key_pem)
    app = await gh.getitem("/app", jwt=app_jwt)
    assert app["slug"] == "paritybot"

    comment = await gh.post(f"/repos/{REPO}/issues/7/comments", data={"body": "Queued"}, oauth_token=token)
    assert comment["user"]["login"] == "paritybot[bot]"
    assert comment["user"]["type"] == "Bot"
    assert comment["html_url"].endswith(f"/{REPO}/pull/7#issuecomment-{comment['id']}")
    edited = await gh.patch(comment["url"], data={"body": "Running"}, oauth_token=token)
    assert edited["body"] == "Running"
    assert fake_github.comment(comment["id"]).bodies == ["Queued", "Running"]

    first = await client.raw(
        "POST", f"/repos/{REPO}/issues/comments/{comment['id']}/reactions", json={"content": "eyes"}
    )
    again = await client.raw(
        "POST", f"/repos/{REPO}/issues/comments/{comment['id']}/reactions", json={"content": "eyes"}
    )
    assert (first[0], again[0]) == (201, 200)
    assert first[2]["id"] == again[2]["id"]
    assert [r.content for r in fake_github.reactions(comment["id"])] == ["eyes"]

    run = await gh.post(
        f"/repos/{REPO}/check-runs",
        data={"name": "paritybot / gpu", "head_sha": SHA, "status": "in_progress"},
        oauth_token=token,
    )
    assert run["pull_requests"][0]["number"] == 7
    for batch in (range(1, 51), range(51, 61)):
        await gh.patch(
            run["url"],
            data={
                "output": {
                    "title": "GPU",
                    "summary": "partial",
                    "annotations": [_annotation(i) for i in batch],
                }
            },
            oauth_token=token,
        )
    done = await gh.patch(
        run["url"], data={"conclusion": "failure", "output": {"summary": "2 failed"}}, oauth_token=token
    )
    assert done["status"] == "completed"
    assert done["completed_at"] is not None
    assert done["output"] == {
        **done["output"],
        "title": "GPU",
        "summary": "2 failed",
        "annotations_count": 60,
    }

    stored = fake_github.check_run(run["id"])
    assert [s["status"] for s in stored.states] == ["in_progress", "in_progress", "in_progress", "completed"]
    assert [a["start_line"] for a in stored.annotations] == list(range(1, 61))
    listed = [
        r
        async for r in gh.getiter(
            f"/repos/{REPO}/commits/{SHA}/check-runs", iterable_key="check_runs", oauth_token=token
        )
    ]
    assert [r["id"] for r in listed] == [run["id"]]
    assert fake_github.violations == []


@pytest.mark.parametrize(
    ("output", "extra", "complaint"),
    [
        ({"title": "t", "summary": "s"}, {"conclusion": "bogus"}, "conclusion"),
        (
            {"title": "t", "summary": "s", "annotations": [_annotation(i) for i in range(1, 52)]},
            {},
            "annotations",
        ),
        ({"title": "t", "summary": "x" * 65_536}, {}, "summary"),
        ({"title": "t", "summary": "s"}, {"status": "completed"}, "conclusion"),
    ],
    ids=["bogus-conclusion", "51-annotations", "summary-65536", "completed-without-conclusion"],
)
async def test_invalid_check_run_is_refused_and_recorded(
    fake_github: FakeGitHub, client: Client, output: dict[str, Any], extra: dict[str, Any], complaint: str
) -> None:
    fake_github.expect_violation("checks/create")
    body = {"name": "gpu", "head_sha": SHA, "output": output, **extra}
    with pytest.raises(ValidationError) as raised:
        await client.gh.post(f"/repos/{REPO}/check-runs", data=body, oauth_token=client.token)
    assert raised.value.status_code == 422
    assert complaint in str(raised.value)
    assert fake_github.check_runs() == []
    [violation] = fake_github.violations
    assert violation.kind == "invalid-request"
    assert any(complaint in e for e in violation.errors)


async def test_null_conclusion_is_accepted_while_in_progress(fake_github: FakeGitHub, client: Client) -> None:
    # The description's response schema lists conclusion's enum without null although it is nullable.
    status, _, run = await client.raw(
        "POST", f"/repos/{REPO}/check-runs", json={"name": "gpu", "head_sha": SHA}
    )
    assert status == 201
    assert run["conclusion"] is None
    assert rest_spec().response_errors("checks/create", 201, run) == []


async def test_comment_body_limit_is_65536_characters(fake_github: FakeGitHub, client: Client) -> None:
    ok = await client.raw("POST", f"/repos/{REPO}/issues/7/comments", json={"body": "x" * 65_536})
    assert ok[0] == 201
    fake_github.expect_violation("too long")
    too_long = await client.raw("POST", f"/repos/{REPO}/issues/7/comments", json={"body": "x" * 65_537})
    assert too_long[0] == 422
    assert len(fake_github.comments(REPO, 7)) == 1


async def test_pull_files_paginate_with_link_headers(fake_github: FakeGitHub, client: Client) -> None:
    fake_github.set_pull_files(REPO, 7, [PullFile(f"pkg/m{i:03}.py", additions=i) for i in range(250)])
    status, headers, page1 = await client.raw("GET", f"/repos/{REPO}/pulls/7/files?per_page=100")
    assert status == 200
    assert len(page1) == 100
    assert 'rel="next"' in headers["Link"]
    assert "page=3" in headers["Link"].split('rel="next"')[1]  # the "last" link
    files = [
        f
        async for f in client.gh.getiter(
            f"/repos/{REPO}/pulls/7/files?per_page=100", oauth_token=client.token
        )
    ]
    assert [f["filename"] for f in files] == [f"pkg/m{i:03}.py" for i in range(250)]
    pages = [
        c.query.get("page", "1")
        for c in fake_github.calls_to("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/files")
    ]
    assert pages == ["1", "1", "2", "3"]


async def test_per_page_over_100_is_a_violation(fake_github: FakeGitHub, client: Client) -> None:
    fake_github.expect_violation("per_page")
    status, _, body = await client.raw("GET", f"/repos/{REPO}/issues/7/comments?per_page=101")
    assert status == 422
    assert "per_page=101" in body["message"]


async def test_unknown_path_and_wrong_method_are_404_and_recorded(
    fake_github: FakeGitHub, client: Client
) -> None:
    fake_github.expect_violation("unknown-path")
    fake_github.expect_violation("method-not-allowed")
    assert (await client.raw("GET", f"/repos/{REPO}/pulls/7/filez"))[0] == 404
    assert (await client.raw("DELETE", f"/repos/{REPO}/pulls/7"))[0] == 404
    assert [v.kind for v in fake_github.violations] == ["unknown-path", "method-not-allowed"]


async def test_unexpected_or_missing_violations_fail_the_check(
    fake_github: FakeGitHub, client: Client
) -> None:
    fake_github.expect_violation("unknown-path")
    await client.raw("GET", "/nope")
    fake_github.check_violations()  # the one expected violation happened

    async with FakeGitHub() as other:
        other.expect_violation("never")
        with pytest.raises(AssertionError, match="expected a violation matching 'never'"):
            other.check_violations()
        other.violations.extend(fake_github.violations)
        other._expected.clear()
        with pytest.raises(AssertionError, match="unknown-path: GET /nope"):
            other.check_violations()


def test_fixture_fails_the_test_that_sent_a_refused_request(tmp_path: Path) -> None:
    tests_dir = Path(__file__).parent
    (tmp_path / "conftest.py").write_text((tests_dir / "conftest.py").read_text())
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    (tmp_path / "test_sends.py").write_text(
        "import aiohttp\n"
        "async def test_bad(fake_github):\n"
        "    async with aiohttp.ClientSession() as s:\n"
        "        await s.get(fake_github.url + '/not/a/github/path')\n"
        "async def test_declared(fake_github):\n"
        "    fake_github.expect_violation('unknown-path')\n"
        "    async with aiohttp.ClientSession() as s:\n"
        "        await s.get(fake_github.url + '/not/a/github/path')\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tests_dir), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert "2 passed, 1 error" in result.stdout, result.stdout + result.stderr
    assert "ERROR at teardown of test_bad" in result.stdout
    assert "request GitHub would refuse: unknown-path: GET /not/a/github/path" in result.stdout


def _jwt(keys_pem: str, app_id: int | str, iat: int, exp: int) -> str:
    return jwt.encode({"iat": iat, "exp": exp, "iss": str(app_id)}, keys_pem, algorithm="RS256")


async def test_bad_app_jwt_gets_401(fake_github: FakeGitHub, client: Client) -> None:
    now = int(time.time())
    stranger = AppKeys.generate().private_key_pem
    cases = {
        "other key": _jwt(stranger, fake_github.app_id, now - 30, now + 500),
        "wrong issuer": _jwt(fake_github.private_key_pem, 1, now - 30, now + 500),
        "lives 11 minutes": _jwt(fake_github.private_key_pem, fake_github.app_id, now - 60, now + 600),
        "expired": _jwt(fake_github.private_key_pem, fake_github.app_id, now - 700, now - 100),
        "not a jwt": "garbage",
    }
    for name, token in cases.items():
        status, _, body = await client.raw("GET", "/app", headers={"Authorization": f"Bearer {token}"})
        assert status == 401, name
        assert body["message"], name
    good = _jwt(fake_github.private_key_pem, fake_github.app_id, now - 60, now + 540)
    assert (await client.raw("GET", "/app", headers={"Authorization": f"Bearer {good}"}))[0] == 200
    # An installation token is not an app credential, and an app JWT is not an installation token.
    assert (await client.raw("POST", "/app/installations/11/access_tokens"))[0] == 401
    status, _, _ = await client.raw(
        "GET", f"/repos/{REPO}/pulls/7", headers={"Authorization": f"Bearer {good}"}
    )
    assert status == 401


async def test_repo_endpoints_need_a_live_token_of_the_right_installation() -> None:
    start = datetime.now(UTC).replace(microsecond=0)
    moment = [start]
    async with FakeGitHub(clock=lambda: moment[0], token_ttl=timedelta(minutes=5)) as fake:
        fake.add_repo(REPO, installation_id=11)
        fake.add_repo("other/thing", installation_id=12)
        fake.add_pull(REPO, 7, head_sha=SHA)
        async with aiohttp.ClientSession() as session:
            gh = GitHubAPI(session, "t", base_url=fake.url)
            issued = await get_installation_access_token(
                gh, installation_id="11", app_id=str(fake.app_id), private_key=fake.private_key_pem
            )
            expected = start + timedelta(minutes=5)
            assert issued["expires_at"] == expected.strftime("%Y-%m-%dT%H:%M:%SZ")
            client = Client(gh, issued["token"], session)
            assert (await client.raw("GET", f"/repos/{REPO}/pulls/7"))[0] == 200
            assert (await client.raw("GET", "/repos/other/thing/pulls/7"))[0] == 404
            assert (await client.raw("GET", f"/repos/{REPO}/pulls/7", headers={"Authorization": ""}))[
                0
            ] == 401
            moment[0] += timedelta(minutes=6)
            status, _, body = await client.raw("GET", f"/repos/{REPO}/pulls/7")
            assert (status, body["message"]) == (401, "Bad credentials")
        fake.check_violations()


async def test_contents_are_base64_at_the_requested_ref(fake_github: FakeGitHub, client: Client) -> None:
    fake_github.set_file(REPO, ".github/paritybot.yml", "environments: []\n")
    fake_github.set_file(REPO, ".github/paritybot.yml", "environments: [gpu]\n", ref=SHA)
    for ref, text in (("", "environments: []\n"), (f"?ref={SHA}", "environments: [gpu]\n")):
        item = await client.gh.getitem(
            f"/repos/{REPO}/contents/.github/paritybot.yml{ref}", oauth_token=client.token
        )
        assert base64.b64decode(item["content"]).decode() == text
        assert rest_spec().response_errors("repos/get-content", 200, item) == []
    encoded = await client.raw("GET", f"/repos/{REPO}/contents/.github%2Fparitybot.yml")
    assert encoded[0] == 200
    raw = await client.gh.getitem(
        f"/repos/{REPO}/contents/.github/paritybot.yml",
        accept="application/vnd.github.raw+json",
        oauth_token=client.token,
    )
    assert raw == "environments: []\n"
    with pytest.raises(BadRequest) as missing:
        await client.gh.getitem(f"/repos/{REPO}/contents/setup.cfg", oauth_token=client.token)
    assert missing.value.status_code == 404
    listing = await client.gh.getitem(f"/repos/{REPO}/contents/.github", oauth_token=client.token)
    assert [(e["name"], e["type"]) for e in listing] == [("paritybot.yml", "file")]


async def test_people_permissions_and_team_membership(fake_github: FakeGitHub, client: Client) -> None:
    fake_github.set_role(REPO, "Maint", "maintain")
    fake_github.add_team_member("acme", "gpu-team", "carol")
    perm = await client.gh.getitem(f"/repos/{REPO}/collaborators/maint/permission", oauth_token=client.token)
    assert (perm["permission"], perm["role_name"]) == ("write", "maintain")
    stranger = await client.gh.getitem(
        f"/repos/{REPO}/collaborators/mallory/permission", oauth_token=client.token
    )
    assert stranger["permission"] == "read"
    member = await client.gh.getitem("/orgs/acme/teams/gpu-team/memberships/carol", oauth_token=client.token)
    assert (member["role"], member["state"]) == ("member", "active")
    with pytest.raises(BadRequest) as not_member:
        await client.gh.getitem("/orgs/acme/teams/gpu-team/memberships/mallory", oauth_token=client.token)
    assert not_member.value.status_code == 404


async def test_injected_failures_then_recovery(fake_github: FakeGitHub, client: Client) -> None:
    fake_github.fail("POST", "/repos/{owner}/{repo}/issues/{issue_number}/comments", 502, times=2)
    for _ in range(2):
        with pytest.raises(GitHubBroken):
            await client.gh.post(
                f"/repos/{REPO}/issues/7/comments", data={"body": "hi"}, oauth_token=client.token
            )
    await client.gh.post(f"/repos/{REPO}/issues/7/comments", data={"body": "hi"}, oauth_token=client.token)
    posts = fake_github.calls_to("POST", f"/repos/{REPO}/issues/7/comments")
    assert [c.status for c in posts] == [502, 502, 201]
    assert all(c.json == {"body": "hi"} for c in posts)
    assert len(fake_github.comments(REPO, 7)) == 1


async def test_responses_match_githubs_response_schemas(fake_github: FakeGitHub, client: Client) -> None:
    fake_github.add_pull(REPO, 8, head_sha="1" * 40, head_repo="eve/widgets", labels=["gpu"], draft=True)
    other = fake_github.add_comment(REPO, 7, "/retest-gpu", user="bob", author_association="MEMBER")
    _, _, run = await client.raw("POST", f"/repos/{REPO}/check-runs", json={"name": "g", "head_sha": SHA})
    await client.raw(
        "PATCH",
        f"/repos/{REPO}/check-runs/{run['id']}",
        json={"output": {"summary": "s", "annotations": [_annotation(1)]}},
    )
    fake_github.set_role(REPO, "bob", "admin")
    fake_github.add_team_member("acme", "core", "bob", role="maintainer")
    requests = [
        ("pulls/get", "GET", f"/repos/{REPO}/pulls/7", None),
        ("pulls/get", "GET", f"/repos/{REPO}/pulls/8", None),
        ("pulls/list-files", "GET", f"/repos/{REPO}/pulls/7/files", None),
        (
            "repos/list-pull-requests-associated-with-commit",
            "GET",
            f"/repos/{REPO}/commits/{SHA}/pulls",
            None,
        ),
        ("issues/list-comments", "GET", f"/repos/{REPO}/issues/7/comments", None),
        ("issues/get-comment", "GET", f"/repos/{REPO}/issues/comments/{other.id}", None),
        ("issues/create-comment", "POST", f"/repos/{REPO}/issues/7/comments", {"body": "x"}),
        (
            "reactions/create-for-issue-comment",
            "POST",
            f"/repos/{REPO}/issues/comments/{other.id}/reactions",
            {"content": "+1"},
        ),
        (
            "reactions/list-for-issue-comment",
            "GET",
            f"/repos/{REPO}/issues/comments/{other.id}/reactions",
            None,
        ),
        ("checks/get", "GET", f"/repos/{REPO}/check-runs/{run['id']}", None),
        ("checks/list-annotations", "GET", f"/repos/{REPO}/check-runs/{run['id']}/annotations", None),
        ("checks/list-for-ref", "GET", f"/repos/{REPO}/commits/{SHA}/check-runs", None),
        (
            "repos/get-collaborator-permission-level",
            "GET",
            f"/repos/{REPO}/collaborators/bob/permission",
            None,
        ),
        ("teams/get-membership-for-user-in-org", "GET", "/orgs/acme/teams/core/memberships/bob", None),
    ]
    for op_id, method, path, body in requests:
        status, _, data = await client.raw(method, path, json=body)
        assert status in (200, 201), (op_id, status, data)
        assert rest_spec().response_errors(op_id, status, data) == [], op_id
    fork_pr = await client.gh.getitem(f"/repos/{REPO}/pulls/8", oauth_token=client.token)
    assert fork_pr["head"]["repo"]["full_name"] == "eve/widgets"
    assert fork_pr["head"]["repo"]["fork"] is True
    assert [label["name"] for label in fork_pr["labels"]] == ["gpu"]


async def test_deleted_comment_is_gone(fake_github: FakeGitHub, client: Client) -> None:
    comment = await client.gh.post(
        f"/repos/{REPO}/issues/7/comments", data={"body": "x"}, oauth_token=client.token
    )
    await client.gh.delete(comment["url"], oauth_token=client.token)
    assert fake_github.comments(REPO, 7) == []
    assert (await client.raw("GET", f"/repos/{REPO}/issues/comments/{comment['id']}"))[0] == 404


async def test_a_failure_after_the_work_carries_the_request_out_and_loses_the_answer(
    fake_github: FakeGitHub, client: Client
) -> None:
    fake_github.fail("POST", "/repos/{owner}/{repo}/check-runs", 502, after=True)
    with pytest.raises(GitHubBroken):
        await client.gh.post(
            f"/repos/{REPO}/check-runs",
            data={"name": "lint", "head_sha": SHA, "external_id": "job-1/lint"},
            oauth_token=client.token,
        )
    [run] = fake_github.check_runs(REPO)  # it was created all the same
    assert run.external_id == "job-1/lint"
    [call] = fake_github.calls_to("POST", f"/repos/{REPO}/check-runs")
    assert (call.status, call.carried_out) == (502, True)


async def test_check_runs_for_a_ref_are_listed_by_app_and_carry_their_external_id(
    fake_github: FakeGitHub, client: Client
) -> None:
    for name in ("lint", "lint", "tests"):  # a second run of the same name: `filter=all` shows both
        await client.gh.post(
            f"/repos/{REPO}/check-runs",
            data={"name": name, "head_sha": SHA, "external_id": f"job/{name}"},
            oauth_token=client.token,
        )
    url = f"/repos/{REPO}/commits/{SHA}/check-runs?filter=all&app_id={fake_github.app_id}&per_page=100"
    runs = [r async for r in client.gh.getiter(url, iterable_key="check_runs", oauth_token=client.token)]
    assert sorted(r["external_id"] for r in runs) == ["job/lint", "job/lint", "job/tests"]
    assert {r["app"]["id"] for r in runs} == {fake_github.app_id}
    latest = f"/repos/{REPO}/commits/{SHA}/check-runs"
    assert (await client.gh.getitem(latest, oauth_token=client.token))["total_count"] == 2
    other_app = f"{latest}?app_id={fake_github.app_id + 1}"
    assert (await client.gh.getitem(other_app, oauth_token=client.token))["check_runs"] == []
