"""A host section becomes a connection in one place, every option kept: the CLI's commands that
reach a host and the resources of a deployment connect alike."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from sglang_stacks.cli import main
from sglang_stacks.config.spec import load_spec
from sglang_stacks.drive import automation
from sglang_stacks.hostops import logs
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.resources.wiring import connection_args

HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDummyKeyForTests"
SSH_HOST = {
    "kind": "ssh",
    "address": "gpu-a",
    "port": 2222,
    "user": "ubuntu",
    "host_key": HOST_KEY,
    "connect_timeout_s": 42,
    "gpu_model": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "gpu_count": 8,
    "memory_per_gpu_mib": 97887,
    "compute_capability": "12.0",
    "interconnect": "pcie",
}
SECTIONS: dict[str, Any] = {
    "host": SSH_HOST,
    "model": {"path": "/shared/kimi-k2.5-int4", "weights_per_gpu_gb": 72.33},
    "server": {"tp_size": 8, "cuda_graph_max_bs": 128, "disable_custom_all_reduce": True},
}
EXPECTED = Connection(
    host="gpu-a", port=2222, user="ubuntu", private_key="KEY", host_key=HOST_KEY, connect_timeout_s=42
)


def test_a_host_section_keeps_every_option_in_its_connection() -> None:
    spec = load_spec(SECTIONS, "mine")

    assert Connection.for_host(spec.host, "KEY") == EXPECTED
    assert Connection.for_host(load_spec({**SECTIONS, "host": {"kind": "emulator"}}, "m").host) == (
        Connection.local()
    )


def test_the_logs_command_reaches_the_host_with_its_timeout_and_pinned_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {f"sglang-stacks:{key}": value for key, value in SECTIONS.items()}
    config["sglang-stacks:sshPrivateKey"] = "KEY"
    reached: list[Connection] = []
    monkeypatch.setattr(automation, "read_outputs", lambda stack, model: None)  # never deployed
    monkeypatch.setattr(automation, "stack_config", lambda stack: config)

    def show(conn: Connection, paths: list[str], lines: int) -> list[str]:
        reached.append(conn)
        return ["a line"]

    monkeypatch.setattr(logs, "show", show)

    assert main(["logs", "mine"]) == 0

    assert reached == [EXPECTED]
    assert reached[0].connect_timeout_s == 42 and reached[0].host_key == HOST_KEY
    assert "a line" in capsys.readouterr().out


def test_a_deployments_connection_args_carry_the_same_options() -> None:
    args = connection_args(load_spec(SECTIONS, "mine"), pulumi.Output.secret("KEY"))

    assert args is not None
    carried = {name: pulumi.get(args, name) for name in ("host", "port", "user", "host_key")}
    assert carried == {"host": "gpu-a", "port": 2222, "user": "ubuntu", "host_key": HOST_KEY}
    assert pulumi.get(args, "per_dial_timeout") == 42
