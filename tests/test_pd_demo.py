"""The shipped disaggregated demo (stacks/Pulumi.demo-pd.yaml: one prefill and two decode emulator
workers on this machine, paired by SGLang's real router in PD mode) with the real Pulumi CLI:
deployed once for the module and benchmarked through the router; destroy leaves nothing listening.
A change to one role, previewed and rolled under client load with the other role untouched, is
tests/test_pd_canary.py's (a fleet with three workers of each role, behind the canary gate).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from tests._pulumi import Workspace, deployed_shipped_stack

pytestmark = pytest.mark.integration

STACK = "demo-pd"


class Demo:
    """The deployed demo: its stack file, router and workers."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.path = workspace.path / "stacks" / f"Pulumi.{STACK}.yaml"

    def fleet(self) -> dict[str, Any]:
        found: dict[str, Any] = yaml.safe_load(self.path.read_text())["config"]["sglang-stacks:fleet"]
        return found

    @property
    def router(self) -> str:
        return f"http://127.0.0.1:{self.fleet()['router']['port']}"

    def urls(self, role: str) -> list[str]:
        hosts = self.fleet()["hosts"]
        return sorted(f"http://127.0.0.1:{h['server_port']}" for h in hosts if h["role"] == role)

    def workers(self) -> dict[str, list[dict[str, Any]]]:
        """The router's workers by type."""
        listed = httpx.get(f"{self.router}/workers", timeout=10).json()["workers"]
        found: dict[str, list[dict[str, Any]]] = {}
        for worker in listed:
            found.setdefault(worker["worker_type"], []).append(worker)
        return found


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    # The last test destroys it; the fixture's destroy is for a test that failed before.
    with deployed_shipped_stack(tmp_path_factory.mktemp("demo-pd"), STACK) as workspace:
        yield Demo(workspace)


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_the_demo_serves_through_the_router_in_pd_mode_with_a_prefill_and_two_decode_workers(
    demo: Demo,
) -> None:
    workers = demo.workers()
    assert sorted(w["url"] for w in workers["prefill"]) == demo.urls("prefill")
    assert sorted(w["url"] for w in workers["decode"]) == demo.urls("decode")
    assert "regular" not in workers
    bootstrap = demo.fleet()["hosts"][0]["bootstrap_port"]
    assert [w["bootstrap_port"] for w in workers["prefill"]] == [bootstrap]
    assert all(w["is_healthy"] for listed in workers.values() for w in listed)

    # A request through the router is prefilled by one worker and decoded by another.
    body = {"text": "hello " * 300, "sampling_params": {"max_new_tokens": 8, "ignore_eos": True}}
    answer = httpx.post(f"{demo.router}/generate", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["meta_info"]["completion_tokens"] == 8

    outputs = demo.workspace.outputs(STACK)
    assert outputs["tok_s"] > 0 and outputs["benchmark_levels"][0]["concurrency"] == 1
    replicas = outputs["replicas"]
    assert [r["role"] for r in replicas] == ["prefill", "decode", "decode"]
    # A worker serves only in a pair: measured through the router, not alone.
    assert all(r["tok_s"] is None for r in replicas)
    assert (
        "--disaggregation-mode prefill --disaggregation-transfer-backend mooncake "
        in replicas[0]["launch_command"]
    )
    assert f"--disaggregation-bootstrap-port {bootstrap}" in replicas[0]["launch_command"]
    assert all("--disaggregation-mode decode" in r["launch_command"] for r in replicas[1:])
    assert all("--max-running-requests 256" in r["launch_command"] for r in replicas[1:])


def test_destroy_stops_every_worker_the_bootstrap_server_and_the_router(demo: Demo) -> None:
    fleet = demo.fleet()
    ports = [h["server_port"] for h in fleet["hosts"]] + [fleet["hosts"][0]["bootstrap_port"]]
    ports.append(fleet["router"]["port"])
    assert all(_listening(port) for port in ports)
    demo.workspace.run("destroy", "--yes", "--skip-preview", "-s", STACK, timeout_s=600)
    assert not any(_listening(port) for port in ports)
