"""Fixtures shared by the whole suite."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests._pulumi import Workspace

if TYPE_CHECKING:
    from toolchain.local_cluster import Cluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with the most integration tests (real engine, sshd, emulator: tens of seconds each) run
    first, the quick files after them. Run side by side (scripts/test.sh), the workers then end
    together, on quick files, instead of one worker running a long file while the other waits.
    Each file's tests stay together and in their order."""
    slow: dict[Path, int] = {}
    for item in items:
        if item.get_closest_marker("integration"):
            slow[item.path] = slow.get(item.path, 0) + 1
    items.sort(key=lambda item: -slow.get(item.path, 0))


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    """A throwaway project folder and local backend for driving the real Pulumi CLI."""
    return Workspace.create(tmp_path)


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[Cluster]:
    """A real local Kubernetes cluster on 127.0.0.1, one per session (tests/kube.py)."""
    from tests.kube import session_cluster

    yield from session_cluster()


@pytest.fixture(scope="session", autouse=True)
def interruptible_children() -> None:
    """Processes the tests start take Ctrl-C (SIGINT) as they would from a terminal, also when the
    suite itself runs as a background job: a shell starts those with SIGINT ignored, and every
    process they start inherits that (a sweep would never see the Ctrl-C its test sends)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
