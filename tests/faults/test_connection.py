"""The SSH connection lost in the middle of an update: sshd on the host stopped (its sessions with
it) during the benchmark, then started again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sglang_stacks.config.spec import EMULATOR_HOST_FACTS
from tests.faults.drill import LONG_BENCHMARK, Drill, finish, healthy, loadgens, servers, wait_for
from tests.sshd import SshServer, start_sshd

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sshd() -> Iterator[SshServer]:
    with start_sshd() as server:
        yield server


def ssh_host(server: SshServer) -> str:
    facts = "".join(f"    {key}: {json.dumps(value)}\n" for key, value in EMULATOR_HOST_FACTS.items())
    return (
        "  sglang-stacks:host:\n"
        "    kind: ssh\n"
        f"    address: {server.host}\n"
        f"    port: {server.port}\n"
        f"    user: {server.user}\n"
        f"    host_key: {server.host_key}\n"
        f"{facts}"
    )


def stop_sshd(server: SshServer) -> None:
    """Stops the test sshd and every session it serves, the way a host's sshd going down does;
    what the sessions run is left alone (it is the host's)."""
    listener = int((server.folder / "sshd.pid").read_text())
    doomed, parents = [listener], {listener}
    for stat in sorted(Path("/proc").glob("[0-9]*/stat"), key=lambda path: int(path.parent.name)):
        try:
            parent = int(stat.read_text().rsplit(") ", 1)[1].split()[1])
            name = (stat.parent / "cmdline").read_bytes().split(b"\0")[0]
        except (OSError, IndexError, ValueError):
            continue
        if parent in parents and name.startswith(b"sshd"):
            doomed.append(int(stat.parent.name))
            parents.add(int(stat.parent.name))
    for pid in doomed:
        os.kill(pid, signal.SIGKILL)


def start_sshd_again(server: SshServer) -> subprocess.Popen[bytes]:
    sshd = "/usr/sbin/sshd" if os.access("/usr/sbin/sshd", os.X_OK) else "sshd"
    process = subprocess.Popen([sshd, "-D", "-e", "-f", str(server.folder / "sshd_config")])
    wait_for(lambda: (server.folder / "sshd.pid").exists(), 10, "sshd to start again")
    return process


def test_sshd_stopped_mid_benchmark_names_the_drop_and_stops_the_load_generator(
    drill: Drill, sshd: SshServer
) -> None:
    port = drill.add_stack("remote", host=ssh_host(sshd), benchmark=LONG_BENCHMARK)
    drill.workspace.run("config", "set", "--secret", "sshPrivateKey", "-s", "remote", stdin=sshd.client_key)
    # The host is this machine behind sshd, with the emulator standing in for SGLang.
    stack_file = drill.workspace.path / "stacks" / "Pulumi.remote.yaml"
    section = "  sglang-stacks:environment:\n"
    stack_file.write_text(stack_file.read_text().replace(section, f"{section}    runtime: emulator\n"))
    update = drill.start("up", "--yes", "--skip-preview", "-s", "remote")
    wait_for(lambda: loadgens(port) or update.poll() is not None, 180, "the benchmark to start")
    assert update.poll() is None, update.communicate()[0]
    stop_sshd(sshd)
    output = finish(update)
    restarted: subprocess.Popen[bytes] | None = None
    try:
        assert update.returncode != 0
        assert "dropped after" in output and "s of the benchmark" in output, output
        assert "Check the connection settings" not in output, output
        # The load generator went with its session; nothing of the tool runs on this side.
        wait_for(lambda: not loadgens(port), 15, "the load generator to stop")
        wait_for(lambda: not drill.tool_processes(), 30, f"no orphans: {drill.tool_processes()}")

        (sshd.folder / "sshd.pid").unlink(missing_ok=True)
        restarted = start_sshd_again(sshd)
        result = drill.up("remote", check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        assert len(servers(port)) == 1 and healthy(port)
        holder = drill.claim()
        assert holder is not None and (holder.stack, holder.updating) == ("remote", False)
        assert loadgens(port) == []
        # The update's SSH reaper ends its master connections once the CLI has exited: seconds later.
        wait_for(lambda: not drill.tool_processes(), 15, "no process of the update left")
    finally:
        drill.workspace.run("destroy", "--yes", "--skip-preview", "-s", "remote", check=False)
        if restarted is not None:
            restarted.terminate()
            restarted.wait()
