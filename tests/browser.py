"""A real headless browser for tests: Debian's Chromium driven through its chromedriver by Selenium.

    with headless_chromium() as browser:
        browser.get(url)

Each browser gets a fresh profile in a temporary folder and the flags that keep it from reaching
anything but the page it is sent to (no sync, no component updates, no background requests).
Without Chromium installed the tests fail with the command that installs it.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

INSTALL_HINT = "Chromium or chromedriver is not installed here; run scripts/ensure-chromium.sh once."
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
)


@contextlib.contextmanager
def headless_chromium() -> Iterator[webdriver.Chrome]:
    """A headless Chromium with a profile of its own; closed, and its profile removed, after the block."""
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.fail(INSTALL_HINT)
    profile = tempfile.mkdtemp(prefix="sglang-stacks-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    # The given chromedriver is used as it is: Selenium's own manager (which downloads drivers) never runs.
    session = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    try:
        yield session
    finally:
        session.quit()
        shutil.rmtree(profile, ignore_errors=True)
