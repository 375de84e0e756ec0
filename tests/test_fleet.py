"""A fleet with the real Pulumi CLI: three emulator "hosts" behind the real OpenSSH server (one state
folder and port each), SGLang's real router (sglang-router) in front. One fleet is deployed for
the module; the tests roll changes over it in order: a flag change under constant load through the
router (no request may fail), a regressing change stopped at the canary, the previous stack file
restoring the fleet.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sglang_stacks.config.spec import EMULATOR_HOST_FACTS
from tests._pulumi import Workspace, emulator_stack, free_port
from tests.sshd import SshServer, start_sshd

pytestmark = pytest.mark.integration

STACK = "fleet"


def fleet_config(server: SshServer, folder: Path, ports: list[int], router_port: int, flags: str) -> str:
    facts = "".join(f"      {key}: {json.dumps(value)}\n" for key, value in EMULATOR_HOST_FACTS.items())
    hosts = "".join(
        "    - kind: ssh\n"
        f"      address: {server.host}\n"
        f"      port: {server.port}\n"
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

    @property
    def router(self) -> str:
        return f"http://127.0.0.1:{self.router_port}"

    def write(self, flags: str) -> None:
        path = self.workspace.path / "stacks" / f"Pulumi.{STACK}.yaml"
        document = yaml.safe_load(path.read_text()) or {}
        secret = {k: v for k, v in (document.get("config") or {}).items() if "sshPrivateKey" in k}
        body = fleet_config(self.server, self.folder, self.ports, self.router_port, flags)
        document["config"] = {**yaml.safe_load("config:\n" + body)["config"], **secret}
        path.write_text(yaml.safe_dump(document, sort_keys=False))

    def workers(self) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = httpx.get(f"{self.router}/workers", timeout=10).json()["workers"]
        return listed

    def server_pids(self) -> dict[int, int]:
        exported = self.workspace.json("stack", "export", "-s", STACK)
        pids = {}
        for resource in exported["deployment"]["resources"]:
            name = resource["urn"].rsplit("::", 1)[1]
            if name.endswith("-server"):
                pids[int(name.split("-host")[1].split("-")[0])] = resource["outputs"]["pid"]
        return pids


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
            workspace.run("destroy", "--yes", "--skip-preview", "-s", STACK, check=False, timeout_s=600)


class Load:
    """Requests sent one after another through the router by two clients, counted."""

    def __init__(self, url: str) -> None:
        self.url, self.ok, self.failed = url, 0, []  # type: ignore[var-annotated]
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._send, daemon=True) for _ in range(2)]

    def _send(self) -> None:
        body = {"text": "hello " * 8, "sampling_params": {"max_new_tokens": 16, "ignore_eos": True}}
        with httpx.Client(timeout=60) as client:
            while not self._stop.is_set():
                try:
                    answer = client.post(f"{self.url}/generate", json=body)
                    if answer.status_code == 200:
                        self.ok += 1
                    else:
                        self.failed.append(f"HTTP {answer.status_code}: {answer.text[:200]}")
                except httpx.HTTPError as error:
                    self.failed.append(repr(error))

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)


def test_a_three_replica_fleet_serves_through_the_router_and_benchmarks_each_replica(fleet: Fleet) -> None:
    workers = fleet.workers()
    assert sorted(w["url"] for w in workers) == sorted(f"http://127.0.0.1:{p}" for p in fleet.ports)
    assert all(w["is_healthy"] for w in workers)
    outputs = fleet.workspace.outputs(STACK)
    assert outputs["router_url"] == fleet.router
    assert outputs["tok_s"] > 0
    assert [r["host"] for r in outputs["replicas"]] == [0, 1, 2]
    assert all(r["tok_s"] > 0 for r in outputs["replicas"])


def test_a_flag_change_rolls_host_by_host_with_no_failed_request_under_load(fleet: Fleet) -> None:
    before = fleet.server_pids()
    fleet.write(BASE_FLAGS + "    max_running_requests: 64\n")
    preview = fleet.workspace.run("preview", "--diff", "-s", STACK).stdout
    assert "max_running_requests" in preview
    with Load(fleet.router) as load:
        time.sleep(1)
        fleet.workspace.run("up", "--yes", "--skip-preview", "-s", STACK, timeout_s=900)
        time.sleep(1)
    assert load.failed == [], f"{len(load.failed)} failed of {load.ok + len(load.failed)}: {load.failed[:3]}"
    assert load.ok > 20
    after = fleet.server_pids()
    assert all(after[i] != before[i] for i in range(3))
    assert len(fleet.workers()) == 3
    assert fleet.workspace.outputs(STACK)["canary"]["verdict"] == "passed"


def test_a_regressing_change_is_stopped_at_the_canary_and_the_previous_file_restores_it(fleet: Fleet) -> None:
    before = fleet.server_pids()
    # The custom all-reduce kernel over PCIe: more than 2x slower (the campaign's 38 tok/s row).
    fleet.write(BASE_FLAGS + "    max_running_requests: 64\n    disable_custom_all_reduce: false\n")
    with Load(fleet.router) as load:
        failed = fleet.workspace.run("up", "--yes", "--skip-preview", "-s", STACK, check=False, timeout_s=900)
    assert failed.returncode != 0
    assert "canary of fleet fleet regressed" in failed.stdout + failed.stderr
    assert load.failed == []
    after = fleet.server_pids()
    assert after[1] == before[1] and after[2] == before[2]  # the roll stopped before them
    assert sorted(w["url"] for w in fleet.workers()) == [
        f"http://127.0.0.1:{p}" for p in sorted(fleet.ports[1:])
    ]

    fleet.write(BASE_FLAGS + "    max_running_requests: 64\n")
    fleet.workspace.run("up", "--yes", "--skip-preview", "-s", STACK, timeout_s=900)
    assert len(fleet.workers()) == 3
    assert fleet.server_pids()[1] == before[1]
