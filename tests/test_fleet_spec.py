"""The fleet section of the stack spec: what it accepts, and the errors that name the key."""

from __future__ import annotations

from typing import Any

import pytest

from sglang_stacks.config.spec import load_spec
from sglang_stacks.errors import SpecError

MODEL = {"path": "/shared/kimi-k2.5-int4", "weights_per_gpu_gb": 72.33}


def sections(**fleet: Any) -> dict[str, Any]:
    hosts = [{"state_dir": f"/var/tmp/h{i}", "server_port": 31000 + i} for i in range(3)]
    return {"model": MODEL, "server": {"tp_size": 8}, "fleet": {"hosts": hosts, **fleet}}


def test_each_host_becomes_a_single_host_spec_with_its_port_and_its_own_emulated_gpus() -> None:
    spec = load_spec(sections(replicas=3, rollout={"batch_size": 2, "canary": False}), "f")
    assert spec.fleet is not None and spec.fleet.batches() == [[0, 1], [2]]
    host = spec.for_host(2)
    assert (host.host.state_dir, host.server.port) == ("/var/tmp/h2", 31002)
    assert host.environment.emulator.state_dir == "/var/tmp/h2/gpus"
    assert host.fleet is None


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"replicas": 2}, "sglang-stacks:fleet: replicas is 2 but 3 host(s) are listed"),
        (
            {"router": {"polcy": "x"}},
            "fleet.router.polcy: unknown key. Remove it or rename it: did you mean policy?",
        ),
        ({"router": {"policy": "fastest"}}, "sglang-stacks:fleet.router.policy: 'fastest' is not allowed"),
        ({"rollout": {"tok_s_tolerance_pct": None}}, "a canary needs a gate"),
        (
            {"rollout": {"batch_size": 2}},
            "rollout.canary measures the canary beside a replica on the current configuration, both out "
            "of the router, while another replica serves; with 3 replicas and batch_size 2 none would "
            "serve meanwhile. Add a host, lower rollout.batch_size, or set rollout.canary: false",
        ),
    ],
)
def test_a_bad_fleet_names_the_key_and_the_fix(change: dict[str, Any], says: str) -> None:
    with pytest.raises(SpecError) as raised:
        load_spec(sections(**change), "f")
    assert says in str(raised.value)


def test_two_hosts_on_one_port_or_a_host_section_beside_the_fleet_are_refused() -> None:
    same_port = sections()
    same_port["fleet"]["hosts"][2]["server_port"] = 31000
    with pytest.raises(SpecError, match=r"hosts\[0\] and hosts\[2\] both serve on 127.0.0.1 port 31000; "):
        load_spec(same_port, "f")
    same_folder = sections()
    same_folder["fleet"]["hosts"][1]["state_dir"] = "/var/tmp/h0"
    with pytest.raises(SpecError, match=r"hosts\[0\] and hosts\[1\] are on one machine and share the "):
        load_spec(same_folder, "f")
    with pytest.raises(SpecError, match=r"move the sglang-stacks:host section into fleet\.hosts"):
        load_spec({**sections(), "host": {"kind": "emulator"}}, "f")
