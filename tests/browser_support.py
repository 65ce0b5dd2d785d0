"""A real browser for the tests: the system's headless Chromium, driven by Selenium.

``start_chromium(tmp_path)`` starts Debian's ``chromium`` with its ``chromium-driver`` and a fresh
profile under ``tmp_path``, with nothing that reaches the network on its own. Without a
Chromium the test is skipped, except in CI (``CI=true``), where that is a failure: the browser
tests must run there (scripts/test.sh installs the packages).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = ("chromedriver",)
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


def _find(names: tuple[str, ...]) -> str | None:
    for name in names:
        found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
        if found:
            return found
    return None


def start_chromium(tmp_path: Path, *, width: int = 1280, height: int = 900):  # type: ignore[no-untyped-def]
    """A headless Chromium (a ``selenium.webdriver.Chrome``); the caller quits it."""
    browser, driver = _find(CHROMIUM), _find(DRIVER)
    if browser is None or driver is None:
        missing = "chromium" if browser is None else "chromium-driver"
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser tests need {missing} (apt-get install chromium chromium-driver)")
        pytest.skip(f"no {missing}: the browser tests need Debian's chromium and chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service(executable_path=driver))
