"""A stolen or kept session cookie: signing out must end the session on the server, so the same
``paritybot_session`` value replayed later opens nothing, and must revoke the GitHub token inside
it; a session also ends by itself (idle and absolute lifetimes) and when GitHub takes back the
viewer's token or access (docs/security.md, "The session").

Before: ``/logout`` only deleted the browser's cookie; the same value replayed later still returned
a private run's log for up to 8 h, and the token inside stayed valid at GitHub.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
from fakegithub import FakeGitHub
from run_page_support import REPO, failed_run
from service_pages import browser, service_pages, sign_in
from viewer_site import PRIVATE, Site, start_site
from yarl import URL

from bot.service.sessions import SESSION_ABSOLUTE_S, SESSION_IDLE_S, SessionPolicy, Verdict, judge
from bot.service.store.sessions import ViewerSession
from bot.service.viewers import SESSION_COOKIE


def sessions_in(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM viewer_sessions").fetchone()[0])


async def test_a_cookie_replayed_after_signing_out_opens_nothing_and_its_token_is_revoked(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    fake_github.add_repo(REPO, installation_id=1, private=True)
    fake_github.set_role(REPO, "alice", "read")
    async with service_pages(fake_github, tmp_path) as pages:
        run = failed_run(pages.store, private=True)
        log = f"{pages.url}/runs/{run}/steps/1/lines?from=1&to=50"
        db = pages.settings.sqlite_path
        async with browser() as b:
            stolen = await sign_in(b, pages, fake_github, "alice")
            (token,) = [t for t, u in fake_github.web.user_tokens.items() if u.login == "alice"]
            async with b.get(log) as r:
                assert r.status == 200 and "test_add" in await r.text()
            assert sessions_in(db) == 1 and token.encode() not in db.read_bytes()  # no token kept
            async with b.get(f"{pages.url}/logout", allow_redirects=False) as r:
                assert r.status == 302 and r.cookies[SESSION_COOKIE].value == ""
        assert sessions_in(db) == 0
        # Whoever kept a copy of the cookie replays it: it is no session any more.
        async with aiohttp.ClientSession() as thief:
            for url in (log, f"{pages.url}/runs/{run}.json", f"{pages.url}/runs/{run}/events"):
                cookie = {"Cookie": f"{SESSION_COOKIE}={stolen}"}
                async with thief.get(url, headers=cookie, allow_redirects=False) as r:
                    assert r.status == 302 and URL(r.headers["Location"]).path == "/login", url
                    assert "test_add" not in await r.text()
    # The token inside was revoked at GitHub, as the App's client (Basic, client id and secret).
    assert fake_github.web.revoked == [token]
    (revoke,) = fake_github.calls_to("DELETE", "/applications/{client_id}/token")
    assert revoke.headers["Authorization"].startswith("Basic ") and revoke.json == {"access_token": token}
    async with (
        aiohttp.ClientSession() as s,
        s.get(f"{fake_github.url}/user", headers={"Authorization": f"Bearer {token}"}) as r,
    ):
        assert r.status == 401


async def signed_in(site: Site, b: aiohttp.ClientSession) -> None:
    async with b.get(f"{site.url}/runs/{PRIVATE}") as r:
        assert r.status == 200


async def status(site: Site, b: aiohttp.ClientSession) -> int:
    async with b.get(f"{site.url}/runs/{PRIVATE}", allow_redirects=False) as r:
        if r.status == 302:
            assert URL(r.headers["Location"]).path == "/login"
        return r.status


async def test_a_session_ends_after_its_idle_and_its_absolute_lifetime(fake_github: FakeGitHub) -> None:
    fake_github.web.sign_in("alice")
    async for site in start_site(fake_github):
        async with browser() as b:
            await signed_in(site, b)
            used = 0.0
            while used + SESSION_IDLE_S - 60 < SESSION_ABSOLUTE_S:  # in use: never idle for long
                site.later(SESSION_IDLE_S - 60)
                used += SESSION_IDLE_S - 60
                assert await status(site, b) == 200, used
            site.later(SESSION_ABSOLUTE_S - used + 1)
            assert await status(site, b) == 302  # past its absolute lifetime, however used
        async with browser() as b:
            await signed_in(site, b)
            site.later(SESSION_IDLE_S + 1)
            assert await status(site, b) == 302  # unused past its idle lifetime


async def test_a_session_ends_when_github_no_longer_accepts_its_token(fake_github: FakeGitHub) -> None:
    fake_github.web.sign_in("alice")
    async for site in start_site(fake_github):
        async with browser() as b:
            await signed_in(site, b)
            # alice revokes the App's authorization on GitHub: her tokens stop working.
            fake_github.web.user_tokens.clear()
            site.later(61)  # the gate's remembered answer expires: GitHub is asked again
            assert await status(site, b) == 302
            assert sessions_in(site.store.path) == 0


def test_the_session_lifetimes_as_decided() -> None:
    start = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    policy = SessionPolicy()
    session = ViewerSession("alice", start, start, start + timedelta(seconds=SESSION_ABSOLUTE_S))
    at = lambda s: start + timedelta(seconds=s)  # noqa: E731
    assert judge(session, "alice", at(10), policy) == Verdict.LIVE
    assert judge(session, "alice", at(policy.seen_every_s), policy) == Verdict.SEEN
    assert judge(session, "alice", at(SESSION_IDLE_S), policy) == Verdict.IDLE
    assert judge(session, "mallory", at(10), policy) == Verdict.UNKNOWN  # not the cookie's login
    assert judge(None, "alice", at(10), policy) == Verdict.UNKNOWN  # signed out
    busy = ViewerSession("alice", start, at(SESSION_ABSOLUTE_S - 1), session.expires_at)
    assert judge(busy, "alice", at(SESSION_ABSOLUTE_S), policy) == Verdict.EXPIRED
