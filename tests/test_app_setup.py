"""Setting the App up in the browser: `serve` with no App offers a one-time page that registers it
through GitHub's manifest flow (the fake GitHub's website and its API) and writes its credentials."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import payloads
import pytest
import yaml
from aiohttp.test_utils import unused_port
from botharness import BotHarness, bot
from fakegithub import FakeGitHub
from setup_support import FILES, ROOT, SetupSite, browser, forms_of, opened, setup_settings, setup_site

from bot.service.settings import Settings, SettingsError
from bot.service.setup import check_setup_settings

__all__ = ["bot"]  # the fixture, imported for pytest


@pytest.fixture
async def site(fake_github: FakeGitHub, tmp_path: Path) -> AsyncIterator[SetupSite]:
    async for s in setup_site(fake_github, tmp_path):
        yield s


async def test_the_set_up_page_registers_the_app_and_writes_its_credentials_for_this_user_only(
    site: SetupSite, fake_github: FakeGitHub, tmp_path: Path
) -> None:
    async with browser() as b:
        async with b.get(opened(site, "organization=acme")) as r:
            assert r.status == 200
            assert str(r.url) == f"{site.url}/setup?organization=acme"  # the token left the address
            assert fake_github.web.url in r.headers["Content-Security-Policy"]  # its form posts there
            method, action, fields = forms_of(await r.text())[1]
        assert (method, action.split("?")[0]) == (
            "post",
            f"{fake_github.web.url}/organizations/acme/settings/apps/new",
        )
        manifest = yaml.safe_load(fields["manifest"])
        assert manifest["redirect_url"] == f"{site.url}/setup/callback"
        assert manifest["callback_urls"] == [f"{site.url}/oauth/callback"]
        assert manifest["hook_attributes"]["url"] == f"{site.url}/webhook"
        assert (
            manifest["default_permissions"]
            == yaml.safe_load((ROOT / "deploy/app-manifest.yml").read_text())["default_permissions"]
        )
        async with b.post(action, data=fields) as r:  # GitHub creates it and sends the browser back
            assert r.status == 200
            done = await r.text()
    assert site.pages.done.is_set()
    (app,) = fake_github.web.conversions
    expected = {
        "app_id_file": str(app["id"]),
        "private_key_path": fake_github.private_key_pem,
        "webhook_secret_file": fake_github.webhook_secret,
        "client_id_file": fake_github.web.client_id,
        "client_secret_file": fake_github.web.client_secret,
    }
    for key, value in expected.items():
        path = getattr(site.settings, key)
        assert path.read_text().strip() == str(value).strip()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert f'<code id="app-id">{app["id"]}</code>' in done
    assert f"{app['html_url']}/installations/new" in done
    # The service now reads them as its App.
    again = Settings(**{k: getattr(site.settings, k) for k in FILES}, public_url=site.url)
    assert not again.awaiting_app_setup()
    assert again.app_id == app["id"] and again.webhook_secret is not None
    again.require_serving()
    assert again.viewer_sign_in() == (fake_github.web.client_id, fake_github.web.client_secret)


async def test_once_the_app_is_registered_the_set_up_page_is_gone(
    site: SetupSite, fake_github: FakeGitHub
) -> None:
    async with browser() as b:
        async with b.get(opened(site)) as r:
            _, action, fields = forms_of(await r.text())[1]
        async with b.post(action, data=fields, allow_redirects=False) as r:
            callback = r.headers["Location"]
        async with b.get(callback) as r:
            assert r.status == 200
        for url in (f"{site.url}/setup", opened(site), callback):  # the cookie and the token too
            async with b.get(url) as r:
                assert r.status == 404


async def test_a_callback_the_page_did_not_start_registers_nothing(
    site: SetupSite, fake_github: FakeGitHub
) -> None:
    async with browser() as b:
        async with b.get(opened(site)) as r:
            _, action, fields = forms_of(await r.text())[1]
        async with b.post(action.split("?")[0] + "?state=forged", data=fields, allow_redirects=False) as r:
            forged = r.headers["Location"]
        async with b.get(forged) as r:
            assert r.status == 404  # no page started it: as if there were none
    assert fake_github.calls_to("POST", "/app-manifests/{code}/conversions") == []
    assert not (site.settings.app_id_file and site.settings.app_id_file.exists())
    assert not site.pages.done.is_set()


def test_the_set_up_page_needs_where_to_write_and_this_services_address(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    settings = setup_settings(fake_github, tmp_path, "https://paritybot.example.org")
    check_setup_settings(settings)
    with pytest.raises(SettingsError, match=r"^PARITYBOT_PUBLIC_URL: not set"):
        check_setup_settings(settings.model_copy(update={"public_url": None}))
    with pytest.raises(SettingsError, match=r"PARITYBOT_CLIENT_SECRET_FILE, and PARITYBOT_PUBLIC_URL$"):
        check_setup_settings(settings.model_copy(update={"client_secret_file": None}))


async def test_a_configured_service_has_no_set_up_page(bot: BotHarness) -> None:
    assert bot.server is not None and bot.session is not None
    for path in ("/setup", "/setup/callback?code=x&state=y"):
        async with bot.session.get(bot.server.make_url(path)) as r:
            assert r.status == 404


async def test_serve_without_an_app_offers_the_page_then_serves_as_the_app_it_registered(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    port = unused_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARITYBOT_")} | {
        f"PARITYBOT_{key.upper()}": str(tmp_path / "app" / name) for key, name in FILES.items()
    }
    env |= {
        "PARITYBOT_PUBLIC_URL": url,
        "PARITYBOT_GITHUB_URL": fake_github.web.url,
        "PARITYBOT_GITHUB_API_URL": fake_github.url,
        "PARITYBOT_APP_MANIFEST": str(ROOT / "deploy" / "app-manifest.yml"),
        "PARITYBOT_DATABASE_URL": f"sqlite:///{tmp_path / 'bot.db'}",
        "PARITYBOT_RUNNER": "host",
        "PARITYBOT_ALLOW_HOST_RUNNER": "trusted-code-only",
        "PARITYBOT_HOST": "127.0.0.1",
        "PARITYBOT_PORT": str(port),
        "PARITYBOT_WORKSPACE_ROOT": str(tmp_path / "ws"),
        "PARITYBOT_CACHE_ROOT": str(tmp_path / "cache"),
    }
    log = (tmp_path / "serve.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli.main", "serve", env=env, cwd=tmp_path, stdout=log, stderr=log
    )
    try:
        async with browser() as b:
            assert (await health(b, url, proc, tmp_path))["status"] == "awaiting set-up"
            async with b.get(f"{url}/setup") as r:
                assert r.status == 404  # not without the token
            logged = set_up_address(tmp_path / "serve.log")
            assert logged.startswith(f"{url}/setup?token=")
            async with b.get(logged) as r:
                _, action, fields = forms_of(await r.text())[1]
            async with b.post(action, data=fields) as r:
                assert r.status == 200
            # The same process goes on as the App: its webhook answers, signed with the new secret.
            assert (await health(b, url, proc, tmp_path, want="ok"))["status"] == "ok"
            for page in (f"{url}/setup", logged):
                async with b.get(page) as r:
                    assert r.status == 404
            secret = (tmp_path / "app" / "webhook-secret").read_text().strip()
            body, headers = payloads.delivery("ping", {"zen": "hi", "hook_id": 1}, secret)
            async with b.post(f"{url}/webhook", data=body, headers=headers) as r:
                assert r.status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
        log.close()


def set_up_address(log: Path) -> str:
    """The set-up page's address, with its token, from `serve`'s log (JSON lines on stderr)."""
    for line in log.read_text().splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict) and "/setup?token=" in str(entry.get("url", "")):
                return str(entry["url"])
    raise AssertionError(f"no set-up address in the log: {log.read_text()[-2000:]}")


async def health(
    s: aiohttp.ClientSession, url: str, proc: asyncio.subprocess.Process, tmp: Path, want: str | None = None
) -> dict[str, str]:
    for _ in range(600):
        if proc.returncode is not None:
            raise AssertionError((tmp / "serve.log").read_text()[-2000:])
        with contextlib.suppress(aiohttp.ClientError):
            async with s.get(f"{url}/healthz") as r:
                data = await r.json()
                if want is None or data.get("status") == want:
                    return dict(data)
        await asyncio.sleep(0.1)
    raise AssertionError(f"serve did not answer: {(tmp / 'serve.log').read_text()[-2000:]}")
