"""A real browser for the tests: Debian's headless Chromium, driven by its chromedriver (Selenium).

``start_chromium(tmp_path)`` starts one with a fresh profile in ``tmp_path``; quit it when done.
Without Chromium the test is skipped, except under CI (``CI=true``), where it fails: the browser
tests must run there (scripts/test.sh installs ``chromium`` and ``chromium-driver``).

Selenium's calls block: from an async test, call them in a thread (``asyncio.to_thread``) so the
servers the browser talks to keep answering.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
CHROMEDRIVER = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
)


def _find(candidates: tuple[str, ...], name: str) -> str | None:
    found = next((c for c in candidates if os.access(c, os.X_OK)), None)
    return found or shutil.which(name)


def start_chromium(tmp_path: Path, *, width: int = 1280, height: int = 900) -> webdriver.Chrome:
    """A headless Chromium with a profile of its own, or a skip (a failure under CI) without one."""
    browser, driver = _find(CHROMIUM, "chromium"), _find(CHROMEDRIVER, "chromedriver")
    if browser is None or driver is None:
        missing = "chromium" if browser is None else "chromium-driver"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{missing} is not installed: the browser tests must run in CI (scripts/test.sh)")
        pytest.skip(f"{missing} is not installed (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (*FLAGS, f"--window-size={width},{height}"):
        options.add_argument(flag)
    profile = tmp_path / "chromium-profile"
    profile.mkdir(parents=True, exist_ok=True)
    options.add_argument(f"--user-data-dir={profile}")
    # Offline: Selenium's manager is not asked to find or fetch a browser or a driver.
    os.environ.setdefault("SE_OFFLINE", "true")
    return webdriver.Chrome(options=options, service=Service(executable_path=driver))
