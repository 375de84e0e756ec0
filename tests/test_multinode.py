"""One server over two nodes with the real Pulumi CLI: the shipped demo stack
(stacks/Pulumi.demo-two-nodes.yaml), tp 16 over two emulator "hosts" of the default 8-GPU profile
on this machine (one state folder and port each), behind SGLang's real router. Deployed once for the
module; a flag change relaunches both nodes, then rank 1 is killed, refresh sees the group gone, up
relaunches both nodes together, and destroy leaves nothing.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sglang_stacks.results.outputs import FleetOutputs
from tests._processes import alive
from tests._pulumi import ROOT, Workspace, shipped_stack_config

pytestmark = pytest.mark.integration

STACK = "demo-two-nodes"
README = (ROOT / "README.md").read_text(encoding="utf-8")


class Deployed:
    """The module's two-node server."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        fleet = yaml.safe_load(self.stack_file.read_text())["config"]["sglang-stacks:fleet"]
        self.ports: list[int] = [host["server_port"] for host in fleet["hosts"]]
        self.init_port: int = fleet["dist_init_port"]
        self.router_port: int = fleet["router"]["port"]

    @property
    def stack_file(self) -> Path:
        return self.workspace.path / "stacks" / f"Pulumi.{STACK}.yaml"

    def servers(self) -> dict[str, dict[str, Any]]:
        """The server resources in the state, by name, with their outputs."""
        return {
            resource["urn"].rsplit("::", 1)[1]: resource.get("outputs", {})
            for resource in self.workspace.deployment(STACK)["resources"]
            if resource["urn"].endswith("-server")
        }

    def pids(self) -> dict[str, int]:
        return {name: outputs["pid"] for name, outputs in self.servers().items()}


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    folder = tmp_path_factory.mktemp("multinode")
    workspace = Workspace.create(folder)
    workspace.extra_env["SGLANG_STACKS_HISTORY"] = str(folder / "history.sqlite")
    workspace.init_stack(STACK, shipped_stack_config(STACK, folder))
    server = Deployed(workspace)
    try:
        workspace.run("up", "--yes", "--skip-preview", "-s", STACK, timeout_s=900)
        yield server
    finally:
        workspace.run("destroy", "--yes", "--skip-preview", "-s", STACK, check=False, timeout_s=600)


def test_a_two_node_tp16_server_deploys_serves_and_benchmarks(deployed: Deployed) -> None:
    outputs = deployed.workspace.outputs(STACK)
    rank0 = f"http://127.0.0.1:{deployed.ports[0]}"
    info = httpx.get(f"{rank0}/server_info", timeout=10).json()
    assert (info["tp_size"], info["nnodes"], info["node_rank"]) == (16, 2, 0)
    assert info["dist_init_addr"] == f"127.0.0.1:{deployed.init_port}"
    # Only rank 0 serves HTTP; the router has the one server.
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{deployed.ports[1]}/health", timeout=2)
    workers = httpx.get(f"http://127.0.0.1:{deployed.router_port}/workers", timeout=10).json()["workers"]
    assert [w["url"] for w in workers] == [rank0]
    assert [r["host"] for r in outputs["replicas"]] == [0]
    # All-reduces cross the hosts' network: one stream is slower than the 8-GPU host's 89.5 tok/s.
    assert 30 < outputs["replicas"][0]["tok_s"] < 75
    assert outputs["tok_s"] > 0
    # The README's "about N tok/s for one stream", through the router to this one server, lies
    # within the benchmark's 95 % interval, rounded as written.
    promised = re.search(r"two-node server benchmarks at about (\d+) tok/s for one stream", README)
    assert promised, "the README names the two-node server's tok/s"
    low, high = FleetOutputs.model_validate(outputs).levels[0].tok_s_ci95
    assert low - 0.5 <= float(promised.group(1)) <= high + 0.5, (promised.group(0), low, high)
    commands = [s["launch_command"] for s in deployed.servers().values()]
    assert sorted(c.split("--node-rank ")[1].split()[0] for c in commands) == ["0", "1"]
    assert all("NCCL_SOCKET_IFNAME=lo" in c and "--nnodes 2" in c for c in commands)


def test_a_flag_change_relaunches_every_node_and_the_group_serves_again(deployed: Deployed) -> None:
    before = deployed.pids()
    path = deployed.stack_file
    document = yaml.safe_load(path.read_text())
    document["config"]["sglang-stacks:server"]["max_running_requests"] = 64
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    preview = deployed.workspace.run("preview", "--diff", "-s", STACK).stdout
    assert preview.count("max_running_requests") >= 2, "both nodes' flags change"
    deployed.workspace.run("up", "--yes", "--skip-preview", "-s", STACK, timeout_s=900)
    after = deployed.pids()
    assert all(after[name] != before[name] and alive(after[name]) for name in after)
    info = httpx.get(f"http://127.0.0.1:{deployed.ports[0]}/server_info", timeout=10).json()
    assert (info["max_running_requests"], info["nnodes"]) == (64, 2)


def test_a_killed_rank_1_is_seen_by_refresh_and_up_relaunches_the_group(deployed: Deployed) -> None:
    before = deployed.pids()
    rank0 = next(pid for name, pid in before.items() if name.endswith("host0-server"))
    rank1 = next(pid for name, pid in before.items() if name.endswith("host1-server"))
    # Rank 0 is paused so that it outlives node 1 (as a real rank 0 may until NCCL notices): the
    # refresh must judge the group, not each process alone.
    os.kill(rank0, signal.SIGSTOP)
    try:
        os.kill(rank1, signal.SIGKILL)
        deployed.workspace.run("refresh", "--yes", "--skip-preview", "-s", STACK, timeout_s=300)
        assert alive(rank0)
        assert deployed.servers() == {}, "refresh finds the whole group gone"
    finally:
        os.kill(rank0, signal.SIGCONT)
    deadline = time.monotonic() + 15
    while alive(rank0) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(rank0), "a dead node takes the whole group down"

    deployed.workspace.run("up", "--yes", "--skip-preview", "-s", STACK, timeout_s=900)
    after = deployed.pids()
    assert sorted(after) == sorted(before)
    assert all(after[name] != before[name] and alive(after[name]) for name in after)
    answer = httpx.post(
        f"http://127.0.0.1:{deployed.router_port}/generate",
        json={"text": "hello", "sampling_params": {"max_new_tokens": 4}},
        timeout=30,
    )
    assert answer.status_code == 200


def test_destroy_stops_both_nodes_and_the_router(deployed: Deployed) -> None:
    pids = deployed.pids()
    assert all(alive(pid) for pid in pids.values())

    deployed.workspace.run("destroy", "--yes", "--skip-preview", "-s", STACK, timeout_s=600)

    assert not any(alive(pid) for pid in pids.values())
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{deployed.router_port}/workers", timeout=2)
    assert not deployed.workspace.deployment(STACK).get("resources")
