"""The shipped demo fleet (stacks/Pulumi.demo-fleet.yaml: three emulator hosts on this machine behind
SGLang's real router) with the real Pulumi CLI and `sglang-stacks rollout`, while two clients send
requests through the router the whole time: deployed once for the module, a neutral change rolls to
every replica, a change 8 % slower per replica is caught by the canary and rolled back, and destroy
leaves nothing. No client request may fail.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from tests._pulumi import ROOT, Workspace, deployed_shipped_stack
from tests._router import Load

README = (ROOT / "README.md").read_text(encoding="utf-8")

pytestmark = pytest.mark.integration

STACK = "demo-fleet"


class Demo:
    """The deployed demo fleet and how to change it."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.path = workspace.path / "stacks" / f"Pulumi.{STACK}.yaml"

    def config(self) -> dict[str, Any]:
        found: dict[str, Any] = yaml.safe_load(self.path.read_text())["config"]
        return found

    @property
    def router(self) -> str:
        return f"http://127.0.0.1:{self.config()['sglang-stacks:fleet']['router']['port']}"

    @property
    def ports(self) -> list[int]:
        return [host["server_port"] for host in self.config()["sglang-stacks:fleet"]["hosts"]]

    def urls(self) -> list[str]:
        return sorted(f"http://127.0.0.1:{port}" for port in self.ports)

    def set_server(self, **flags: Any) -> None:
        """Sets these server flags in the stack file, the rest of it as it is."""
        document = yaml.safe_load(self.path.read_text())
        server = document["config"]["sglang-stacks:server"]
        for name, value in flags.items():
            if value is None:
                server.pop(name, None)
            else:
                server[name] = value
        self.path.write_text(yaml.safe_dump(document, sort_keys=False))

    def workers(self) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = httpx.get(f"{self.router}/workers", timeout=10).json()["workers"]
        return listed

    def served(self, name: str) -> list[Any]:
        """The value of launch flag ``name`` (its dest) on each replica, as /get_server_info says."""
        infos = [httpx.get(f"http://127.0.0.1:{p}/get_server_info", timeout=10).json() for p in self.ports]
        return [info[name] for info in infos]

    def server_pids(self) -> dict[int, int]:
        return self.workspace.server_pids(STACK)

    def rollout(self) -> subprocess.CompletedProcess[str]:
        """`sglang-stacks rollout demo-fleet`, run in the workspace as a user would."""
        return subprocess.run(
            [sys.executable, "-m", "sglang_stacks", "rollout", STACK],
            cwd=self.workspace.path,
            env=self.workspace.env(),
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
        )


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    # The last test destroys it; the fixture's destroy is for a test that failed before.
    with deployed_shipped_stack(tmp_path_factory.mktemp("demo-fleet"), STACK) as workspace:
        yield Demo(workspace)


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_the_shipped_demo_fleet_serves_three_emulated_replicas_through_the_router(demo: Demo) -> None:
    workers = demo.workers()
    assert sorted(w["url"] for w in workers) == demo.urls()
    assert all(w["is_healthy"] for w in workers)
    # Each registration says which configuration the replica serves: the canary gate reads it.
    labels = {w["metadata"].get("sglang_stacks_config") for w in workers}
    assert len(labels) == 1 and labels != {None}
    outputs = demo.workspace.outputs(STACK)
    assert outputs["router_url"] == demo.router
    assert outputs["tok_s"] > 0
    assert [r["host"] for r in outputs["replicas"]] == [0, 1, 2]
    assert all(r["tok_s"] > 0 for r in outputs["replicas"])
    # The first deploy has no replica on an earlier configuration to judge the canary against.
    assert outputs["canary"]["passed"]
    assert outputs["canary"]["line"] == (
        "not judged: no replica on the current configuration answered: nothing to compare with"
    )


def test_a_neutral_change_rolls_to_every_replica_with_no_failed_request_under_load(demo: Demo) -> None:
    before = demo.server_pids()
    demo.set_server(max_running_requests=1024)  # above every captured batch size: no change in speed
    previewed = demo.workspace.run("preview", "--diff", "-s", STACK)
    preview = previewed.stdout + previewed.stderr  # Pulumi prints the program's info on stderr
    assert "rolls a change 1 replica(s) at a time" in preview, preview
    order = preview[preview.index("rolls a change 1 replica(s) at a time") :]
    places = [
        order.index(part)
        for part in (
            "batch 1 (canary: host 0 is benchmarked beside host 1, which leaves the router",
            "host 0 (",
            "batch 2",
            "host 1 (",
            "batch 3",
            "host 2 (",
        )
    ]
    assert places == sorted(places), order
    assert order.count("+ --max-running-requests 1024") == 3, order

    with Load(demo.router) as load:
        time.sleep(1)
        rolled = demo.rollout()
        time.sleep(1)

    said = rolled.stdout + rolled.stderr
    assert rolled.returncode == 0, said
    assert load.failed == [], load.none_failed()
    assert load.ok > 20
    after = demo.server_pids()
    assert all(after[i] != before[i] for i in range(3))
    assert demo.served("max_running_requests") == [1024, 1024, 1024]
    assert sorted(w["url"] for w in demo.workers()) == demo.urls()
    canary = demo.workspace.outputs(STACK)["canary"]
    print(f"neutral change: {canary['line']}")
    assert canary["passed"], canary
    assert canary["reference_url"] == f"http://127.0.0.1:{demo.ports[1]}"
    low, high = canary["change_ci95_pct"]
    assert low <= canary["change_pct"] <= high


def test_an_eight_percent_slower_change_is_caught_by_the_canary_and_rolled_back_under_load(
    demo: Demo,
) -> None:
    before = demo.server_pids()
    demo.set_server(cuda_graph_max_bs=512)  # the emulator's profile: 82.0 tok/s against 89.5 at 128

    with Load(demo.router) as load:
        time.sleep(1)
        rolled = demo.rollout()
        time.sleep(1)

    said = rolled.stdout + rolled.stderr
    assert rolled.returncode == 1, said
    caught = re.search(
        r"The canary of fleet demo-fleet regressed: "
        r"(canary ([0-9.]+) tok/s \(95 % CI [0-9.]+ to [0-9.]+\) against "
        r"([0-9.]+) tok/s \(95 % CI [0-9.]+ to [0-9.]+\) on \S+, (-[0-9.]+) % \(95 % CI (-[0-9.]+) to "
        r"(-[0-9.]+) %, significant, p[<=][0-9.]+\)(?:, \d+ runs a side over \d+ measurements)?, "
        r"beyond the 5 % tolerance)",
        said,
    )
    assert caught, said
    # Said by the gate's error, which the engine shows; neither its record for drivers nor the
    # rollout's own lines repeat it.
    assert "sglang-stacks-failure:" not in said
    assert "rollout: the canary of demo-fleet regressed, as its gate's error above says." in said
    assert said.count(caught.group(1)) == 1, said  # Pulumi's rows name the error's class only
    print(f"slower change: {caught.group(1)}")
    assert float(caught.group(4)) < -5
    # The README's "about N % slower per replica" lies within the change's interval, rounded as written.
    promised = re.search(r"rollout demo-fleet +# about (\d+) % slower per replica", README)
    assert promised, "the README's Fleets block names the slower change's size"
    low, high = float(caught.group(5)), float(caught.group(6))
    assert low - 0.5 <= -float(promised.group(1)) <= high + 0.5, (promised.group(0), low, high)
    assert "rolled back: all 3 replicas serve the configuration of the update of" in said, said
    assert load.failed == [], load.none_failed()
    after = demo.server_pids()
    assert after[0] != before[0] and (after[1], after[2]) == (before[1], before[2])  # only the canary changed
    workers = demo.workers()
    assert sorted(w["url"] for w in workers) == demo.urls()
    assert all(w["is_healthy"] for w in workers)
    assert demo.served("cuda_graph_max_bs") == [128, 128, 128]
    assert demo.served("max_running_requests") == [1024, 1024, 1024]
    assert demo.workspace.outputs(STACK)["canary"]["line"] == (
        "not judged: the canary runs the configuration the fleet serves: no change to judge"
    )

    # Pulumi's state holds the configuration rolled back to: the previous file changes nothing.
    demo.set_server(cuda_graph_max_bs=128)
    demo.workspace.run("up", "--yes", "--skip-preview", "--expect-no-changes", "-s", STACK, timeout_s=900)
    assert demo.server_pids() == after


def test_destroy_stops_every_replica_and_the_router(demo: Demo) -> None:
    ports = [*demo.ports, int(demo.router.rsplit(":", 1)[1])]
    assert all(_listening(port) for port in ports)

    demo.workspace.run("destroy", "--yes", "--skip-preview", "-s", STACK, timeout_s=600)

    assert not any(_listening(port) for port in ports)
    assert not demo.workspace.deployment(STACK).get("resources")
