"""An outsider probing the run pages for private names: a private repository's run, or its pull
request's latest run, must answer exactly as a made-up one does — the same status, headers and
body — on every route, whoever asks (anonymous: sent to sign in; signed in without access: 404).

Before: ``/repos/acme/gizmos/pulls/32/latest.json`` of a private, existing run answered 302 to
/login and a made-up one 404, and the same on ``/runs/<id>``, ``.json``, ``/events``, ``/lines``.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from urllib.parse import urlencode

import aiohttp
import pytest
from fakegithub import FakeGitHub
from run_page_support import REPO, failed_run
from service_pages import browser, service_pages, sign_in

# Headers that say when, not what: left out of the comparison.
TIMELY = {"date", "expires", "last-modified", "age"}
TAILS = ("", ".json", "/events", "/steps/1/lines?from=1&to=5")


async def answer(b: aiohttp.ClientSession, url: str, path: str) -> tuple[int, dict[str, str], bytes]:
    """The answer to ``path``, with the path itself (in the sign-in's way back) written PATH."""
    async with b.get(url + path, allow_redirects=False) as r:
        body = await r.read()
        headers = {k.lower(): v for k, v in r.headers.items() if k.lower() not in TIMELY}
    if "location" in headers:
        headers["location"] = headers["location"].replace(urlencode({"next": path}), "next=PATH")
    return r.status, headers, body.replace(path.encode(), b"PATH")


def pairs(real_run: str) -> list[tuple[str, str]]:
    made_up = uuid.uuid4().hex[: len(real_run)]
    out = [(f"/runs/{real_run}{tail}", f"/runs/{made_up}{tail}") for tail in TAILS]
    out += [(f"/runs/{real_run}", "/runs/not%20an%20id")]
    latest = f"/repos/{REPO}/pulls/7/latest.json"
    out += [
        (latest, f"/repos/{REPO}/pulls/8/latest.json"),
        (latest, "/repos/octo/gizmos/pulls/7/latest.json"),
    ]
    out += [(latest, f"/repos/{REPO}/pulls/seven/latest.json")]
    return out


@pytest.mark.parametrize("viewer", ["anonymous", "signed in without access", "a token without access"])
async def test_a_private_run_answers_exactly_as_a_made_up_one(
    viewer: str, fake_github: FakeGitHub, tmp_path: Path
) -> None:
    fake_github.add_repo(REPO, installation_id=1, private=True)
    fake_github.set_role(REPO, "alice", "read")
    async with service_pages(fake_github, tmp_path) as pages, browser() as b:
        real = failed_run(pages.store, private=True)
        if viewer == "signed in without access":
            await sign_in(b, pages, fake_github, "bob")
        if viewer == "a token without access":
            b.headers["Authorization"] = f"Bearer {fake_github.web.user_token('bob')}"
        for real_path, made_up_path in pairs(real):
            seen = await answer(b, pages.url, real_path)
            assert seen == await answer(b, pages.url, made_up_path), (real_path, made_up_path)
            assert seen[0] == (302 if viewer == "anonymous" else 404), real_path
        # The gate does let in those who may: the same routes answer alice.
        async with browser() as alice:
            await sign_in(alice, pages, fake_github, "alice")
            for tail in TAILS:
                async with alice.get(f"{pages.url}/runs/{real}{tail}", allow_redirects=False) as r:
                    assert r.status == 200, tail
