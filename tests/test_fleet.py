"""A fleet over SSH with the real Pulumi CLI: three emulator "hosts" behind the real OpenSSH server
(one state folder and port each; host 1 reached through a forwarder that can die like its sshd),
SGLang's real router (sglang-router) in front. One fleet is deployed for the module: it serves and
benchmarks each replica; then a host dies mid-roll under constant load through the router (no
request may fail), and the previous stack file restores the fleet.

The rolling of changes behind the canary gate (a neutral change to every replica, a slower one
caught and rolled back, under load) runs on the shipped demo fleet: test_fleet_demo.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sglang_stacks.config.spec import EMULATOR_HOST_FACTS
from tests._proxy import TcpForwarder
from tests._pulumi import Workspace, emulator_stack, free_port
from tests._router import Load
from tests.sshd import SshServer, start_sshd

pytestmark = pytest.mark.integration

STACK = "fleet"


def fleet_config(
    server: SshServer, ssh_ports: list[int], folder: Path, ports: list[int], router_port: int, flags: str
) -> str:
    facts = "".join(f"      {key}: {json.dumps(value)}\n" for key, value in EMULATOR_HOST_FACTS.items())
    hosts = "".join(
        "    - kind: ssh\n"
        f"      address: {server.host}\n"
        f"      port: {ssh_ports[i]}\n"
        f"      user: {server.user}\n"
        f"      host_key: {server.host_key}\n"
        f"      state_dir: {folder}/host{i}\n"
        f"      server_port: {port}\n"
        f"{facts}"
        for i, port in enumerate(ports)
    )
    fleet = (
        "  sglang-stacks:fleet:\n"
        "    replicas: 3\n"
        "    hosts:\n"
        f"{hosts}"
        "    router:\n"
        f"      port: {router_port}\n"
        f"      metrics_port: {router_port + 1 if router_port < 65535 else 29001}\n"
        "      policy: round_robin\n"
        "      health_check_interval_s: 1\n"
        f"      state_dir: {folder}/router\n"
        "    rollout:\n"
        "      batch_size: 1\n"
        "      tok_s_tolerance_pct: 5\n"
    )
    text = emulator_stack(port=ports[0], state_dir=folder, server=flags, extra=fleet)
    config: dict[str, Any] = yaml.safe_load(text)["config"]
    del config["sglang-stacks:host"]
    config["sglang-stacks:environment"]["runtime"] = "emulator"
    del config["sglang-stacks:server"]["port"]
    return yaml.safe_dump({"config": config}, sort_keys=False).removeprefix("config:\n")


class Fleet:
    """The deployed fleet of this module and how to change it."""

    def __init__(self, workspace: Workspace, server: SshServer, folder: Path) -> None:
        self.workspace, self.server, self.folder = workspace, server, folder
        self.ports = [free_port() for _ in range(3)]
        self.router_port = free_port()
        self.host1_sshd = TcpForwarder(free_port(), server.port)
        """Host 1's SSH port: a forwarder to the sshd, closed when the test kills the host."""
        self.host1_sshd.open()

    @property
    def router(self) -> str:
        return f"http://127.0.0.1:{self.router_port}"

    def write(self, flags: str) -> None:
        path = self.workspace.path / "stacks" / f"Pulumi.{STACK}.yaml"
        document = yaml.safe_load(path.read_text()) or {}
        secret = {k: v for k, v in (document.get("config") or {}).items() if "sshPrivateKey" in k}
        ssh_ports = [self.server.port, self.host1_sshd.port, self.server.port]
        body = fleet_config(self.server, ssh_ports, self.folder, self.ports, self.router_port, flags)
        document["config"] = {**yaml.safe_load("config:\n" + body)["config"], **secret}
        path.write_text(yaml.safe_dump(document, sort_keys=False))

    def workers(self) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = httpx.get(f"{self.router}/workers", timeout=10).json()["workers"]
        return listed

    def served_flags(self, name: str) -> list[Any]:
        """The value of launch flag ``name`` (its dest) on each replica, as /get_server_info says."""
        infos = [httpx.get(f"http://127.0.0.1:{p}/get_server_info", timeout=10).json() for p in self.ports]
        return [info[name] for info in infos]

    def urls(self, *hosts: int) -> list[str]:
        """The replicas' URLs (of ``hosts``, or all), sorted as a list of the router's is compared."""
        return sorted(f"http://127.0.0.1:{self.ports[i]}" for i in (hosts or range(3)))

    def rollout(self) -> subprocess.CompletedProcess[str]:
        """`sglang-stacks rollout fleet`, run in the workspace as a user would."""
        return subprocess.run(
            [sys.executable, "-m", "sglang_stacks", "rollout", STACK],
            cwd=self.workspace.path,
            env=self.workspace.env(),
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
        )

    def server_pids(self) -> dict[int, int]:
        return self.workspace.server_pids(STACK)


BASE_FLAGS = "    cuda_graph_max_bs: 128\n"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("fleet")
    with start_sshd() as server:
        workspace = Workspace.create(folder)
        workspace.extra_env["SGLANG_STACKS_HISTORY"] = str(folder / "history.sqlite")
        deployed = Fleet(workspace, server, folder)
        workspace.init_stack(STACK)
        workspace.run("config", "set", "--secret", "sshPrivateKey", "-s", STACK, stdin=server.client_key)
        deployed.write(BASE_FLAGS)
        try:
            workspace.run("up", "--yes", "--skip-preview", "-s", STACK, timeout_s=900)
            yield deployed
        finally:
            deployed.host1_sshd.close()
            # A test that killed the host may have failed before reviving it; the destroy runs anyway.
            with contextlib.suppress(OSError):
                deployed.host1_sshd.open()
            workspace.run("destroy", "--yes", "--skip-preview", "-s", STACK, check=False, timeout_s=600)
            deployed.host1_sshd.close()


def test_a_three_replica_fleet_serves_through_the_router_and_benchmarks_each_replica(fleet: Fleet) -> None:
    workers = fleet.workers()
    assert sorted(w["url"] for w in workers) == fleet.urls()
    assert all(w["is_healthy"] for w in workers)
    # Each registration says which configuration the replica serves: the canary gate reads it.
    labels = {w["metadata"].get("sglang_stacks_config") for w in workers}
    assert len(labels) == 1 and labels != {None}
    outputs = fleet.workspace.outputs(STACK)
    assert outputs["router_url"] == fleet.router
    assert outputs["tok_s"] > 0
    assert [r["host"] for r in outputs["replicas"]] == [0, 1, 2]
    assert all(r["tok_s"] > 0 for r in outputs["replicas"])


def test_a_host_killed_mid_roll_stops_it_the_router_serves_and_the_old_file_restores(fleet: Fleet) -> None:
    before = fleet.server_pids()
    served_before = fleet.served_flags("max_running_requests")
    canary = next(w["id"] for w in fleet.workers() if w["url"] == fleet.urls(0)[0])
    fleet.write(BASE_FLAGS + "    max_running_requests: 48\n")
    done: list[subprocess.CompletedProcess[str]] = []
    rolling = threading.Thread(target=lambda: done.append(fleet.rollout()))
    with Load(fleet.router) as load:
        rolling.start()
        # Host 1 dies (its server and its sshd) once the canary is back in the router, before the
        # roll reaches it.
        deadline = time.monotonic() + 600
        while not [w for w in fleet.workers() if w["url"] == fleet.urls(0)[0] and w["id"] != canary]:
            assert time.monotonic() < deadline and rolling.is_alive(), "the canary never came back"
            time.sleep(0.2)
        os.kill(before[1], signal.SIGKILL)
        fleet.host1_sshd.close()
        answered_before = load.ok
        rolling.join(900)
        time.sleep(2)
    said = done[0].stdout + done[0].stderr
    assert done[0].returncode == 3, said  # failed, not at the canary: nothing is rolled back
    assert "Nothing accepts SSH connections at" in said and "connection refused" in said, said
    assert "failed (see above), not at its canary gate" in said, said
    assert load.ok > answered_before  # the router kept answering after the host died
    assert load.failed == [], load.none_failed()
    assert sorted(w["url"] for w in fleet.workers()) == fleet.urls(0, 2)
    assert fleet.server_pids()[2] == before[2]  # the roll stopped before host 2

    fleet.host1_sshd.open()  # the host is back, its server still dead: the refresh notices that
    fleet.write(BASE_FLAGS)
    fleet.workspace.run("up", "--yes", "--skip-preview", "--refresh", "-s", STACK, timeout_s=900)
    assert sorted(w["url"] for w in fleet.workers()) == fleet.urls()
    assert fleet.served_flags("max_running_requests") == served_before
