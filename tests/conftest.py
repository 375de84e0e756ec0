"""Fixtures shared by the whole suite."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests._pulumi import Workspace


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    """A throwaway project folder and local backend for driving the real Pulumi CLI."""
    return Workspace.create(tmp_path)


@pytest.fixture(scope="session", autouse=True)
def interruptible_children() -> None:
    """Processes the tests start take Ctrl-C (SIGINT) as they would from a terminal, also when the
    suite itself runs as a background job: a shell starts those with SIGINT ignored, and every
    process they start inherits that (a sweep would never see the Ctrl-C its test sends)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
