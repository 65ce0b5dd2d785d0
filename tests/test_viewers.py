"""Who may see a repository's pages: the gate in front of a page, signing in with GitHub (the App's
user authorization, against the fake GitHub's website and API), and the session cookie."""

from __future__ import annotations

from collections.abc import AsyncIterator
from http.cookies import SimpleCookie

import aiohttp
import pytest
from fakegithub import FakeGitHub, rest_spec
from openapi_schema_validator import OAS30ReadValidator
from viewer_site import PRIVATE, PUBLIC, Site, start_site
from yarl import URL

from bot.service.viewers import SESSION_COOKIE, safe_next


@pytest.fixture
async def site(fake_github: FakeGitHub) -> AsyncIterator[Site]:
    async for s in start_site(fake_github):
        yield s


def browser() -> aiohttp.ClientSession:
    # A browser keeps cookies of 127.0.0.1 too (aiohttp's jar does only when told).
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def test_a_public_repositorys_page_is_shown_to_anyone(site: Site) -> None:
    async with browser() as b, b.get(f"{site.url}/runs/{PUBLIC}", allow_redirects=False) as r:
        assert r.status == 200
        assert await r.text() == f"the runs of {PUBLIC}"


async def test_an_anonymous_viewer_signs_in_with_github_and_comes_back_to_the_page(
    site: Site, fake_github: FakeGitHub
) -> None:
    fake_github.web.sign_in("alice")
    async with browser() as b:
        async with b.get(f"{site.url}/runs/{PRIVATE}?tab=logs", allow_redirects=False) as first:
            assert first.status == 302
            login = URL(first.headers["Location"])
            assert (login.path, login.query["next"]) == ("/login", f"/runs/{PRIVATE}?tab=logs")
        async with b.get(f"{site.url}/runs/{PRIVATE}?tab=logs") as r:
            assert r.status == 200
            assert await r.text() == f"the runs of {PRIVATE}"
            hops = [str(h.url).split("?")[0] for h in r.history]
        assert hops == [
            f"{site.url}/runs/{PRIVATE}",
            f"{site.url}/login",
            f"{fake_github.web.url}/login/oauth/authorize",
            f"{site.url}/oauth/callback",
        ]
        cookie = SimpleCookie(r.history[-1].headers["Set-Cookie"])[SESSION_COOKIE]
        assert cookie["httponly"] and cookie["samesite"] == "Lax" and cookie["path"] == "/"
        assert "alice" not in cookie.value  # sealed: the login and the token are not readable
    # The viewer's read access was asked of GitHub with the viewer's own token.
    asked = fake_github.calls_to("GET", f"/repos/{PRIVATE}")
    assert [c.headers["Authorization"].split()[-1][:4] for c in asked][-1] == "ghu_"


async def test_a_signed_in_viewer_without_access_gets_404_as_for_a_repository_that_does_not_exist(
    site: Site, fake_github: FakeGitHub
) -> None:
    fake_github.web.sign_in("bob")
    async with browser() as b:
        async with b.get(f"{site.url}/runs/{PRIVATE}") as r:
            assert r.status == 404
            denied = await r.text()
        async with b.get(f"{site.url}/runs/acme/nothing-here") as r:
            assert r.status == 404
            assert await r.text() == denied


async def test_read_access_is_remembered_briefly_then_asked_again_and_its_loss_ends_the_session(
    site: Site, fake_github: FakeGitHub
) -> None:
    fake_github.web.sign_in("alice")
    async with browser() as b:
        async with b.get(f"{site.url}/runs/{PRIVATE}") as r:
            assert r.status == 200
        asked = len(fake_github.calls_to("GET", f"/repos/{PRIVATE}"))
        fake_github.set_role(PRIVATE, "alice", "none")  # alice loses access
        async with b.get(f"{site.url}/runs/{PRIVATE}") as r:
            assert r.status == 200  # remembered: GitHub is not asked on every view
        assert len(fake_github.calls_to("GET", f"/repos/{PRIVATE}")) == asked
        site.later(61)
        async with b.get(f"{site.url}/runs/{PRIVATE}", allow_redirects=False) as r:
            # Asked again: the access this session was let in with is gone, and the session with
            # it; signing in again shows GitHub's answer of now (404).
            assert r.status == 302 and URL(r.headers["Location"]).path == "/login"
            assert r.cookies[SESSION_COOKIE].value == ""
        async with b.get(f"{site.url}/runs/{PRIVATE}", allow_redirects=True) as r:
            assert r.status == 404


async def test_while_github_cannot_say_whether_a_repository_is_public_its_page_is_treated_as_private(
    site: Site, fake_github: FakeGitHub
) -> None:
    fake_github.fail("GET", "/repos/{owner}/{repo}/installation", 502, times=1)
    async with browser() as b:
        async with b.get(f"{site.url}/runs/{PUBLIC}", allow_redirects=False) as r:
            assert r.status == 302  # fail closed: sign in first
        async with b.get(f"{site.url}/runs/{PUBLIC}", allow_redirects=False) as r:
            assert r.status == 200  # the failure was not remembered: GitHub is asked again


async def test_a_callback_this_browser_did_not_start_signs_nobody_in(
    site: Site, fake_github: FakeGitHub
) -> None:
    fake_github.web.sign_in("mallory")  # login CSRF: signing the victim in as the attacker
    async with browser() as attacker, attacker.get(f"{site.url}/login", allow_redirects=False) as r:
        authorize = r.headers["Location"]
    async with browser() as b, b.get(authorize, allow_redirects=False) as r:
        callback = r.headers["Location"]  # the attacker's code and state
    async with browser() as victim:
        async with victim.get(callback, allow_redirects=False) as r:
            assert r.status == 400  # no sign-in started in this browser
        async with victim.get(f"{site.url}/login", allow_redirects=False) as r:
            assert r.status == 302  # the victim's own sign-in, with a state of its own
        async with victim.get(callback, allow_redirects=False) as r:
            assert r.status == 400  # not the state this browser was given
            assert SESSION_COOKIE not in r.cookies
        async with victim.get(f"{site.url}/runs/{PRIVATE}", allow_redirects=False) as r:
            assert r.status == 302


async def test_a_changed_session_cookie_is_no_session(site: Site, fake_github: FakeGitHub) -> None:
    fake_github.web.sign_in("alice")
    async with browser() as b:
        async with b.get(f"{site.url}/runs/{PRIVATE}") as r:
            assert r.status == 200
        sealed = next(c for c in b.cookie_jar if c.key == SESSION_COOKIE).value
        b.cookie_jar.update_cookies({SESSION_COOKIE: sealed[:-6] + "AAAAAA"}, URL(site.url))
        async with b.get(f"{site.url}/runs/{PRIVATE}", allow_redirects=False) as r:
            assert r.status == 302
        async with b.get(f"{site.url}/logout", allow_redirects=False) as r:
            assert r.status == 302
            assert r.cookies[SESSION_COOKIE].value == ""


@pytest.mark.parametrize(
    ("asked", "goes"),
    [
        ("/runs/abc?x=1", "/runs/abc?x=1"),
        ("//evil.example/", "/"),
        ("https://evil.example/", "/"),
        ("/\\evil.example", "/"),
        ("/runs/\nSet-Cookie: x", "/"),
        (None, "/"),
    ],
)
def test_signing_in_goes_back_to_a_page_of_this_site_only(asked: str | None, goes: str) -> None:
    assert safe_next(asked) == goes


async def test_without_sign_in_set_up_a_private_repositorys_page_is_shown_to_nobody(
    fake_github: FakeGitHub,
) -> None:
    async for site in start_site(fake_github, sign_in=False):
        async with browser() as b:
            async with b.get(f"{site.url}/runs/{PRIVATE}", allow_redirects=False) as r:
                assert r.status == 404
            async with b.get(f"{site.url}/runs/{PUBLIC}", allow_redirects=False) as r:
                assert r.status == 200
            async with b.get(f"{site.url}/login", allow_redirects=False) as r:
                assert r.status == 404


async def test_the_fake_answers_a_viewers_token_as_github_documents_it(fake_github: FakeGitHub) -> None:
    fake_github.add_repo(PRIVATE, private=True)
    fake_github.set_role(PRIVATE, "alice", "write")
    token = fake_github.web.user_token("alice")
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json"}
    async with aiohttp.ClientSession(headers=headers) as s:
        async with s.get(f"{fake_github.url}/user") as r:
            me = await r.json()
        async with s.get(f"{fake_github.url}/repos/{PRIVATE}") as r:
            repo = await r.json()
        async with s.get(f"{fake_github.url}/repos/{PRIVATE}/pulls/1") as r:
            assert r.status == 404  # a viewer's token reads no more than the repository
    assert me["login"] == "alice"
    assert repo["private"] is True and repo["permissions"]["push"] is True
    # The description's answer is oneOf(private-user, public-user), which its own example fits
    # twice over (public-user allows any property): the private user's schema is the one that holds.
    spec = rest_spec()
    private_user = {"$ref": "urn:github-rest-openapi#/components/schemas/private-user"}
    assert list(OAS30ReadValidator(private_user, registry=spec.registry).iter_errors(me)) == []
    assert rest_spec().response_errors("repos/get", 200, repo) == []


async def test_a_program_sends_its_users_token_and_sees_what_that_user_may_read(
    site: Site, fake_github: FakeGitHub
) -> None:
    """`paritybot repro` reads a private run's record with the user's own GitHub token: no
    sign-in, the same question to GitHub, the same 404 for a user without access."""
    alice, bob = fake_github.web.user_token("alice"), fake_github.web.user_token("bob")
    async with aiohttp.ClientSession() as s:
        for token, status in ((alice, 200), (bob, 404), ("ghu_not-a-token", 404)):
            headers = {"Authorization": f"Bearer {token}"}
            async with s.get(f"{site.url}/runs/{PRIVATE}", headers=headers, allow_redirects=False) as r:
                assert r.status == status, token
        async with s.get(f"{site.url}/runs/{PRIVATE}", allow_redirects=False) as r:
            assert r.status == 302  # no token, no session: sign in first
    asked = fake_github.calls_to("GET", f"/repos/{PRIVATE}")
    assert {c.headers["Authorization"].split()[-1] for c in asked} >= {alice, bob}
