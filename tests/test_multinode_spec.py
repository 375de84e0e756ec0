"""A multi-node server in the stack spec: fleet.nodes_per_replica, each node's flags, the
interface variables, the checks that name the key, preflight per node and the memory plan over
the whole group."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sglang_stacks.cli import main
from sglang_stacks.config import preflight
from sglang_stacks.config.memory import plan_memory
from sglang_stacks.config.spec import StackSpec, load_spec
from sglang_stacks.errors import SpecError
from sglang_stacks.resources.wiring import launch_flags

SSH_FACTS = {
    "kind": "ssh",
    "user": "ubuntu",
    "host_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDummyKeyForTests",
    "gpu_model": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "gpu_count": 8,
    "memory_per_gpu_mib": 97887,
    "compute_capability": "12.0",
    "interconnect": "pcie",
}


def sections(**fleet: Any) -> dict[str, Any]:
    hosts = [
        {**SSH_FACTS, "address": "gpu-a", "node_address": "10.0.0.1"},
        {**SSH_FACTS, "address": "gpu-b"},
    ]
    return {
        "model": {"path": "/shared/kimi-k2.5-int4", "total_weights_gb": 578.64},
        "server": {"tp_size": 16, "cuda_graph_max_bs": 128, "disable_custom_all_reduce": True},
        "fleet": {"nodes_per_replica": 2, "hosts": hosts, **fleet},
    }


def problem(changed: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as raised:
        load_spec(changed, "two-nodes")
    return str(raised.value)


def test_each_node_gets_its_rank_and_rank_0s_init_address() -> None:
    spec = load_spec(sections(dist_init_port=29500, socket_ifname="ens1f0"), "two-nodes")
    flags = [launch_flags(spec.for_host(i)) for i in (0, 1)]
    assert [(f.nnodes, f.node_rank, f.dist_init_addr) for f in flags] == [
        (2, 0, "10.0.0.1:29500"),
        (2, 1, "10.0.0.1:29500"),
    ]
    assert all(f.tp_size == 16 for f in flags)
    env = spec.for_host(1).environment.env
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "ens1f0"


def test_two_replicas_of_two_nodes_each_have_their_own_rendezvous() -> None:
    changed = sections()
    changed["fleet"]["hosts"] += [{**SSH_FACTS, "address": "gpu-c"}, {**SSH_FACTS, "address": "gpu-d"}]
    changed["fleet"]["rollout"] = {"canary": False}  # two replicas: none would serve beside a canary's
    spec = load_spec(changed, "two-by-two")
    assert spec.fleet is not None and spec.fleet.replica_count == 2
    assert spec.fleet.replica_hosts(1) == [2, 3]
    assert launch_flags(spec.for_host(3)).dist_init_addr == "gpu-c:20001"
    assert launch_flags(spec.for_host(2)).node_rank == 0


def test_tp_that_does_not_split_over_the_nodes_names_the_key() -> None:
    changed = sections()
    changed["server"]["tp_size"] = 9
    said = problem(changed)
    assert "server.tp_size 9 does not split over fleet.nodes_per_replica 2" in said
    assert "multiple of 2" in said


def test_a_host_count_that_is_not_a_multiple_of_the_nodes_names_the_key() -> None:
    changed = sections(nodes_per_replica=3)
    said = problem(changed)
    assert "sglang-stacks:fleet" in said and "nodes_per_replica is 3 but 2 host(s) are listed" in said


def test_replicas_must_match_the_hosts_over_the_nodes() -> None:
    said = problem(sections(replicas=2))
    assert "replicas is 2 but 2 host(s) are listed; each replica runs over 2 hosts" in said
    assert "set replicas: 1" in said


def test_node_flags_in_the_server_section_are_refused() -> None:
    changed = copy.deepcopy(sections())
    changed["server"]["node_rank"] = 1
    assert "server.node_rank is set in the stack file" in problem(changed)


def _findings(spec: StackSpec) -> dict[str, preflight.Finding]:
    return {f.code: f for f in preflight.run_preflight(spec, "0.5.8")}


def test_preflight_counts_gpus_per_node() -> None:
    spec = load_spec(sections(socket_ifname="ens1f0"), "two-nodes").for_host(0)
    found = _findings(spec)
    assert "tp-exceeds-gpus" not in found
    assert "gpus-idle" not in found  # 16 over two nodes: all 8 GPUs of each
    too_many = sections()
    too_many["server"]["tp_size"] = 32
    found = _findings(load_spec(too_many, "two-nodes").for_host(1))
    assert found["tp-exceeds-gpus"].severity == "error"
    assert (
        "tp_size 32 over 2 nodes needs 16 GPUs per node but the host declares 8"
        in found["tp-exceeds-gpus"].message
    )


def test_preflight_asks_for_the_interface_between_nodes() -> None:
    found = _findings(load_spec(sections(), "two-nodes").for_host(1))
    assert found["multinode-socket-ifname"].severity == "warning"
    assert found["multinode-socket-ifname"].key == "fleet.socket_ifname"
    named = _findings(load_spec(sections(socket_ifname="ib0"), "two-nodes").for_host(1))
    assert "multinode-socket-ifname" not in named
    assert "10.0.0.1:20000" in named["multinode-init-address"].message


def test_the_memory_plan_divides_the_weights_over_the_whole_group() -> None:
    two_nodes = plan_memory(load_spec(sections(), "two-nodes").for_host(0))
    assert two_nodes.target_weights_gb == pytest.approx(578.64 / 16)
    # Real hosts: the pool in tokens needs the model's attention shape, which these do not declare.
    assert two_nodes.verdict == "unknown" and "KV cell" in (two_nodes.unknown_reason or "")
    declared = sections()
    declared["model"].update(
        kv_cache={"attention": "mla", "layers": 61, "latent_dim": 576},
        context_length=262144,
        cuda_graph_mib_per_batch_size=20,
        activation_mib_per_prefill_token=0.1875,
    )
    judged = plan_memory(load_spec(declared, "two-nodes").for_host(0))
    assert judged.fits and judged.max_total_num_tokens is not None and judged.max_total_num_tokens > 500_000
    one_host = sections()
    del one_host["fleet"]
    one_host["server"]["tp_size"] = 8
    one_host["host"] = {**SSH_FACTS, "address": "gpu-a"}
    assert plan_memory(load_spec(one_host, "one-host")).target_weights_gb == pytest.approx(578.64 / 8)


def test_render_shows_a_nodes_own_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = {f"sglang-stacks:{key}": value for key, value in sections(socket_ifname="ens1f0").items()}
    (tmp_path / "Pulumi.two.yaml").write_text(yaml.safe_dump({"config": stack}))
    assert main(["render", "two", "--stacks-dir", str(tmp_path), "--host", "1", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["argv"][document["argv"].index("--node-rank") + 1] == "1"
    assert document["argv"][document["argv"].index("--dist-init-addr") + 1] == "10.0.0.1:20000"
    assert document["env"]["NCCL_SOCKET_IFNAME"] == "ens1f0"
    assert document["memory"]["target_weights_gb"] == pytest.approx(578.64 / 16, abs=1e-3)
    assert main(["render", "two", "--stacks-dir", str(tmp_path), "--host", "2"]) == 1
    assert "--host 2: stack 'two' has hosts 0..1 in fleet.hosts" in capsys.readouterr().err
