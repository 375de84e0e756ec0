"""The control plane with the real Pulumi CLI over a real sshd: one SSH handshake per command and
host and a refresh's reads in one session (both counted at sshd), and a CLI killed mid-call that
leaves no key and no connection behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sglang_stacks.hostops import command_folder
from tests._pulumi import Workspace, pulumi_binary
from tests.sshd import SshServer, start_sshd
from tests.test_deployment import emulator_pids, new_port, new_stack, processes_under, ssh_config
from tests.test_transport import key_copies, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sshd() -> Iterator[SshServer]:
    with start_sshd() as server:
        yield server


@pytest.fixture
def ports() -> Iterator[list[int]]:
    """Server ports for the test; any emulator still serving on one of them is stopped after it."""
    taken: list[int] = []
    yield taken
    for port in taken:
        for pid in emulator_pids(port):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    monkeypatch.setenv("SGLANG_STACKS_HISTORY", str(tmp_path / "history.sqlite"))
    return Workspace.create(tmp_path)


def handshakes(sshd: SshServer, workspace: Workspace, *args: str) -> tuple[int, int]:
    """How many SSH connections and sessions (remote commands) `pulumi <args>` opened on the host."""
    before = sshd.connections(), sshd.sessions()
    workspace.run(*args)
    return sshd.connections() - before[0], sshd.sessions() - before[1]


def test_each_command_opens_one_ssh_connection_to_the_host(
    workspace: Workspace, sshd: SshServer, tmp_path: Path, ports: list[int]
) -> None:
    new_stack(workspace, "baseline", sshd, ssh_config(sshd, tmp_path, port=new_port(ports)))

    ours: set[str] = set()
    done = threading.Event()
    watcher = threading.Thread(target=folders_of_children, args=(ours, done), daemon=True)
    watcher.start()
    try:
        counts = {
            "first up": handshakes(sshd, workspace, "up", "--yes", "-s", "baseline"),
            "preview": handshakes(sshd, workspace, "preview", "-s", "baseline"),
            "up, nothing changed": handshakes(sshd, workspace, "up", "--yes", "-s", "baseline"),
            "refresh": handshakes(sshd, workspace, "refresh", "--yes", "-s", "baseline"),
            "destroy": handshakes(sshd, workspace, "destroy", "--yes", "-s", "baseline"),
        }
    finally:
        done.set()
        watcher.join()

    # Before, each remote call was a connection of its own: 5 for a preview, 9 for a no-op up.
    assert {name: opened for name, (opened, _) in counts.items()} == dict.fromkeys(counts, 1)
    # The four reads of a refresh (environment, probe, claim, server) share one session. A preview
    # adds the program's look at what the host serves; `refresh --yes` and `up` each run the
    # engine twice (a preview first), reading the host each time. Before, every read was a session
    # of its own: 5 for a preview, 9 for a no-op up, 8 for a refresh.
    sessions = {name: count for name, (_, count) in counts.items()}
    assert (sessions["preview"], sessions["up, nothing changed"], sessions["refresh"]) == (2, 3, 2)
    # Every command's connection folder went with it. (Other folders on the machine belong to
    # other commands, such as those of tests running beside this one.)
    assert len(ours) == len(counts), ours  # one folder per command, each seen while it ran
    base = command_folder._private_base()
    wait_for(lambda: not [name for name in ours if (base / name).exists()])


def folders() -> list[Path]:
    """The connection folders of the updates running (or not yet cleaned up) on this machine."""
    return list(command_folder._private_base().iterdir())


def folders_of_children(seen: set[str], done: threading.Event) -> None:
    """Names of the connection folders of the Pulumi commands this process runs (a folder is named
    after its command's pid), sampled until ``done``."""
    while not done.is_set():
        for folder in folders():
            with contextlib.suppress(OSError, ValueError):
                if command_folder._stat(int(folder.name.split("-")[0]))[1] == os.getpid():
                    seen.add(folder.name)
        time.sleep(0.05)


def test_a_cli_killed_during_a_long_remote_step_leaves_no_key_and_no_connection(
    workspace: Workspace, sshd: SshServer, tmp_path: Path, ports: list[int]
) -> None:
    since = time.time() - 1  # find compares whole seconds
    port = new_port(ports)
    slow = ssh_config(sshd, tmp_path, port=port, emulator={"faults": {"slow_readiness_s": 60}})
    new_stack(workspace, "baseline", sshd, slow)
    update = subprocess.Popen(
        [pulumi_binary(), "up", "--yes", "--skip-preview", "--non-interactive", "-s", "baseline"],
        cwd=workspace.path,
        env=workspace.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: emulator_pids(port), timeout_s=120)  # the update waits for readiness now
        folder = wait_for(lambda: list(command_folder._private_base().glob(f"{update.pid}-*")))[0]

        update.send_signal(signal.SIGKILL)
        update.wait()

        # The reaper ends the update's master connection and removes its socket folder.
        wait_for(lambda: not folder.exists())
        assert key_copies(sshd.client_key, since, skip=sshd.folder) == []
    finally:
        update.kill()
        for pid in processes_under(workspace.path):
            os.kill(pid, signal.SIGKILL)
