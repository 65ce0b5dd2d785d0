"""Registering the App before its operator does: whoever reaches a fresh `serve` first must not get
the set-up page, whatever address or headers they come with; only the holder of the one-time
token `serve` writes to its own log can register, and once the App is registered nobody can.

Before: ``/setup`` needed no token and no loopback address; any visitor got the form, posted the
manifest from their own GitHub account, and the callback wrote the key, webhook secret and client
secret of an App the attacker owned.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import stat
from pathlib import Path

import aiohttp
from fakegithub import FakeGitHub
from run_page_support import free_port
from setup_support import FILES, browser, forms_of, setup_settings, setup_site

from bot.service.setup import SETUP_COOKIE, serve_setup

CONVERSIONS = "/app-manifests/{code}/conversions"
# What a client may claim about where it comes from; none of it opens the page.
CLAIMS: list[dict[str, str]] = [
    {},
    {"X-Forwarded-For": "127.0.0.1"},
    {"X-Forwarded-For": "127.0.0.1, 10.0.0.1", "X-Real-IP": "127.0.0.1", "X-Client-IP": "::1"},
    {"Forwarded": "for=127.0.0.1;proto=https", "X-Forwarded-Host": "localhost", "Host": "localhost"},
    {"Cookie": f"{SETUP_COOKIE}=guessed"},
]


def logged_address(logs: io.StringIO) -> str | None:
    for line in logs.getvalue().splitlines():
        with contextlib.suppress(ValueError):
            url = str(json.loads(line).get("url", ""))
            if "/setup?token=" in url:
                return url
    return None


async def refused(url: str, path: str, headers: dict[str, str], local: str = "127.0.0.1") -> None:
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(local, 0))) as attacker,
        attacker.get(url + path, headers=headers, allow_redirects=False) as r,
    ):
        body = await r.text()
        assert (r.status, body) == (404, "Not Found"), (path, headers)
        assert SETUP_COOKIE not in r.cookies and "manifest" not in body


async def test_only_the_token_from_serve_s_log_opens_the_set_up_page(
    fake_github: FakeGitHub, tmp_path: Path, json_logs: io.StringIO
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    settings = setup_settings(fake_github, tmp_path, url).model_copy(
        update={"host": "127.0.0.1", "port": port}
    )
    serving = asyncio.create_task(serve_setup(settings))
    try:
        while logged_address(json_logs) is None:
            assert not serving.done(), serving
            await asyncio.sleep(0.05)
        address = str(logged_address(json_logs))
        assert address.startswith(f"{url}/setup?token=")
        wrong = "/setup?token=" + "0" * 48
        for local in ("127.0.0.1", "127.0.0.2"):
            for headers in CLAIMS:
                for path in ("/setup", "/setup?organization=acme", wrong, "/setup/callback?code=x&state=y"):
                    await refused(url, path, headers, local)
        assert fake_github.calls_to("POST", CONVERSIONS) == []
        assert not (tmp_path / "app").exists()
        # The operator, with the address from the log (here through another address: a proxy).
        connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
        jar = aiohttp.CookieJar(unsafe=True)
        async with aiohttp.ClientSession(connector=connector, cookie_jar=jar) as operator:
            async with operator.get(address) as r:
                assert r.status == 200 and str(r.url) == f"{url}/setup"
                _, action, fields = forms_of(await r.text())[1]
            async with operator.post(action, data=fields) as r:
                assert r.status == 200
        assert await asyncio.wait_for(serving, 10) is True  # `serve` goes on as the App now
    finally:
        serving.cancel()
    (app,) = fake_github.web.conversions
    for key in FILES:
        path = getattr(settings, key)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert (tmp_path / "app" / "app-id").read_text().strip() == str(app["id"])


async def test_after_the_app_is_registered_neither_token_nor_cookie_opens_the_page(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    async for site in setup_site(fake_github, tmp_path):
        with_token = f"{site.url}/setup?token={site.pages.token}"
        async with browser() as operator:
            async with operator.get(with_token) as r:
                _, action, fields = forms_of(await r.text())[1]
            async with operator.post(action, data=fields, allow_redirects=False) as r:
                callback = r.headers["Location"]
            async with operator.get(callback) as r:
                assert r.status == 200
            for path in (with_token, f"{site.url}/setup", callback):  # the cookie goes with each
                async with operator.get(path, allow_redirects=False) as r:
                    assert r.status == 404, path
        assert len(fake_github.web.conversions) == 1
