"""Fixtures shared by the whole suite."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests._pulumi import Workspace
from tests.cluster_files import cluster_file

if TYPE_CHECKING:
    from toolchain.local_cluster import Cluster


CPU_REPORT_ENV = "SGLANG_STACKS_TEST_CPU"
"""A file prefix: each worker appends a line per test to ``<prefix>-<pid>.tsv`` (node id, seconds,
CPU seconds of its own and of the processes it started that ended), which ``benchmarks/suite_cpu.py``
sums up by file."""
CLUSTER_SCOPE = "the session's Kubernetes cluster"
"""The one scope of the test files that use the session's cluster (`cluster_file`)."""


def _scope(nodeid: str) -> str:
    """What runs on one worker under ``--dist loadfile``: a test file, or every cluster file."""
    path = nodeid.split("::", 1)[0]
    return CLUSTER_SCOPE if cluster_file(path) else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadfile`` (scripts/test.sh), the files that use the session's Kubernetes
    cluster go to one worker as if they were one file: each worker's session starts a cluster of its
    own, and two at once would compete for the machine's cores and their pods for its ports."""
    if config.getoption("dist", "no") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

    class ClusterFilesTogether(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    return ClusterFilesTogether(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The cluster's files first (their tests take minutes each, on one worker), then files with the
    most integration tests (real engine, sshd, emulator: tens of seconds each), the quick files
    after them. Run side by side (scripts/test.sh), the workers then end together, on quick files,
    instead of one worker running a long file while the other waits. Each scope's tests (a file's,
    or the cluster's files') stay together and in their order."""
    slow: dict[str, int] = {}
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        scope = _scope(item.nodeid)
        first.setdefault(scope, index)
        if item.get_closest_marker("integration"):
            slow[scope] = slow.get(scope, 0) + 1

    def order(item: pytest.Item) -> tuple[bool, int, int]:
        scope = _scope(item.nodeid)
        return scope != CLUSTER_SCOPE, -slow.get(scope, 0), first[scope]

    items.sort(key=order)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With ``SGLANG_STACKS_TEST_CPU`` set, what the test cost (setup, call and teardown: a file's
    shared deployment is paid by its first test)."""
    prefix = os.environ.get(CPU_REPORT_ENV)
    if not prefix:
        yield
        return
    before, started = os.times(), time.monotonic()
    yield
    after = os.times()
    own = after.user - before.user + after.system - before.system
    ended = after.children_user - before.children_user + after.children_system - before.children_system
    with open(f"{prefix}-{os.getpid()}.tsv", "a", encoding="utf-8") as report:
        report.write(f"{item.nodeid}\t{time.monotonic() - started:.2f}\t{own:.2f}\t{ended:.2f}\n")


@pytest.fixture(autouse=True)
def _a_current_event_loop() -> None:
    """Every test starts with a current event loop on the main thread. ``asyncio.run`` (the load
    generator's client, which some tests run in this process) leaves the main thread with none, and
    the Pulumi SDK's outputs and mocks take the current one: a later test in the same worker failed
    or passed by the order in which the files were given out."""
    try:
        asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:
        asyncio.set_event_loop(asyncio.new_event_loop())


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    """A throwaway project folder and local backend for driving the real Pulumi CLI."""
    return Workspace.create(tmp_path)


_RUNNING_CLUSTER = contextlib.ExitStack()
"""The session's cluster while it runs: stopped once the worker's last cluster test is done (the
cluster's files run together, first), not when its session ends a quarter of an hour later, its
daemons' CPU and memory the other files' again."""


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A real local Kubernetes cluster on 127.0.0.1, one per session (tests/kube.py)."""
    from tests.kube import session_cluster

    yield _RUNNING_CLUSTER.enter_context(contextlib.contextmanager(session_cluster)(tmp_path_factory))
    _RUNNING_CLUSTER.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the last test of the cluster's files, the cluster stops (and is checked to have left
    nothing behind, as at the session's end)."""
    yield
    if cluster_file(item.nodeid) and (nextitem is None or not cluster_file(nextitem.nodeid)):
        _RUNNING_CLUSTER.close()


@pytest.fixture(scope="session", autouse=True)
def interruptible_children() -> None:
    """Processes the tests start take Ctrl-C (SIGINT) as they would from a terminal, also when the
    suite itself runs as a background job: a shell starts those with SIGINT ignored, and every
    process they start inherits that (a sweep would never see the Ctrl-C its test sends)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
