"""A real headless browser for tests: Debian's Chromium driven through its chromedriver by Selenium.

    with headless_chromium() as browser:
        browser.get(url)

``read_dashboard(url)`` reads a study's trial count and best trial off optuna-dashboard's page.
Each browser gets a fresh profile in a temporary folder and the flags that keep it from reaching
anything but the page it is sent to (no sync, no component updates, no background requests).
Without Chromium installed the tests fail with the command that installs it.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

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


@dataclass(frozen=True)
class DashboardView:
    """What optuna-dashboard's trial list of a study shows."""

    trials: int
    """The count above the list (``4 Trials``)."""
    best_number: int
    """The number of the trial marked ``Best Trial``."""
    best_value: float
    """Its value, from its details."""


def read_dashboard(study_url: str) -> DashboardView:
    """Open a study's trial list in headless Chromium and read the trial count and the best trial
    off the page, as a person would."""
    with headless_chromium() as browser:
        browser.get(study_url + "/trials")
        # The list says "0 Trials" until the study's trials arrive; the best's chip comes with them.
        chip = WebDriverWait(browser, 60).until(
            lambda b: b.find_element(By.XPATH, "//*[text()='Best Trial']")
        )
        count = _text_when(browser, r"(\d+) Trials")
        chip.click()  # the best trial's details
        best = _text_when(
            browser,
            r"Trial (\d+) \(trial_id=\d+\)\s*\nComplete\s*\nBest Trial\s*\nNote\s*\nValue\s*\n([-\d.e+]+)",
        )
    return DashboardView(int(count.group(1)), int(best.group(1)), float(best.group(2)))


def _text_when(browser: webdriver.Chrome, pattern: str) -> re.Match[str]:
    """The first match of ``pattern`` in the page's visible text, once the page shows it."""
    found: list[re.Match[str]] = []

    def shown(driver: webdriver.Chrome) -> bool:
        match = re.search(pattern, driver.find_element(By.TAG_NAME, "body").text)
        if match:
            found.append(match)
        return match is not None

    WebDriverWait(browser, 60, poll_frequency=0.25).until(shown)
    return found[0]


def dashboard_url(process: subprocess.Popen[str]) -> str:
    """The study URL `sweep dashboard` prints first."""
    assert process.stdout is not None
    line = process.stdout.readline()
    found = re.search(r"http://127\.0\.0\.1:\d+/dashboard/studies/\d+", line)
    assert found, f"no dashboard URL in {line!r}; stderr: {process.stderr.read() if process.stderr else ''}"
    return found.group(0)
