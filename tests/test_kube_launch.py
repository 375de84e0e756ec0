"""A kubernetes host in the stack spec, the cluster's GPU facts as preflight sees them, and the pods'
launch: SGLang's argv from the one renderer, a multi-node group's node flags as LeaderWorkerSet's
variables, the launch's digest. The cluster itself is exercised in tests/test_kube_deploy.py."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from sglang_stacks.components._wiring import launch_flags
from sglang_stacks.config import preflight
from sglang_stacks.config.render import render_argv
from sglang_stacks.config.spec import StackSpec, load_spec
from sglang_stacks.errors import PreflightError, SpecError
from sglang_stacks.kube.facts import NodeFacts, cluster_spec, node_facts
from sglang_stacks.kube.launch import server_launch

STACKS = Path(__file__).resolve().parent.parent / "stacks"
GPU_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
    "nvidia.com/gpu.memory": "97887",
    "nvidia.com/gpu.compute.major": "12",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/cuda.driver.major": "580",
    "nvidia.com/cuda.driver.minor": "65",
    "nvidia.com/cuda.driver.rev": "06",
}


def shipped(name: str) -> dict[str, Any]:
    config = yaml.safe_load((STACKS / f"Pulumi.{name}.yaml").read_text())["config"]
    return {key.removeprefix("sglang-stacks:"): value for key, value in config.items()}


def spec_of(sections: dict[str, Any], stack: str = "k8s-test") -> StackSpec:
    return load_spec(sections, stack)


def test_the_shipped_stack_names_a_cluster_and_no_gpu_facts() -> None:
    spec = spec_of(shipped("k8s-baseline"))
    assert spec.host.kind == "kubernetes" and spec.host.cluster is not None
    assert spec.host.cluster.selector() == {"nvidia.com/gpu.product": GPU_LABELS["nvidia.com/gpu.product"]}
    assert spec.runtime == "emulator"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"gpu_count": 4}, "gpu_count are read from the cluster's nodes"),
        ({"address": "gpu-a"}, "address apply to kind: ssh only"),
        ({"cluster": None}, "a kubernetes host needs a cluster section"),
        ({"cluster": {"image": "x:1", "node_selector": {"bad key!": "v"}}}, "are not Kubernetes labels"),
        ({"cluster": {"image": "x:1", "namespace": "Not_A_Name"}}, "sglang-stacks:host.cluster.namespace"),
    ],
)
def test_a_wrong_cluster_host_is_named_with_its_fix(change: dict[str, Any], named: str) -> None:
    sections = copy.deepcopy(shipped("k8s-baseline"))
    sections["host"] = {**sections["host"], **change}
    with pytest.raises(SpecError) as raised:
        spec_of(sections)
    assert named in str(raised.value)


def test_an_emulator_host_with_a_cluster_is_refused() -> None:
    sections = copy.deepcopy(shipped("baseline"))
    sections["host"]["cluster"] = {"image": "x:1"}
    with pytest.raises(SpecError, match="cluster applies to kind: kubernetes only"):
        spec_of(sections)


def node(gpus: int = 8, labels: dict[str, str] | None = None) -> NodeFacts:
    return NodeFacts("node-a", {**GPU_LABELS, **(labels or {})}, gpus)


def test_preflight_judges_the_gpus_a_pod_gets_from_the_nodes_labels() -> None:
    spec = spec_of(shipped("k8s-baseline"))
    found = node_facts(spec, [node(gpus=8)])
    assert (found.gpu_model, found.gpu_count, found.memory_per_gpu_mib) == (
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        8,
        97887,
    )
    assert (found.compute_capability, found.driver_version) == ("12.0", "580.65.06")
    judged = cluster_spec(spec, found)
    assert not [f for f in preflight.run_preflight(judged, "0.5.8") if f.severity == "error"]
    # The same stack on 48 GB GPUs: the memory plan stops it before anything is applied.
    small = cluster_spec(spec, node_facts(spec, [node(labels={"nvidia.com/gpu.memory": "49152"})]))
    errors = [f for f in preflight.run_preflight(small, "0.5.8") if f.severity == "error"]
    assert [f.code for f in errors] == ["memory-does-not-fit"]


def test_no_matching_node_and_too_few_gpus_are_named_before_anything_is_applied() -> None:
    spec = spec_of(shipped("k8s-baseline"))
    with pytest.raises(PreflightError) as raised:
        node_facts(spec, [node(labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})])
    assert "no node" in str(raised.value) and "NVIDIA-H100-80GB-HBM3" in str(raised.value)
    with pytest.raises(PreflightError) as raised:
        node_facts(spec, [node(gpus=4)])
    assert "requests 8 nvidia.com/gpu" in str(raised.value) and "at most 4" in str(raised.value)


def test_a_one_node_server_runs_the_renderers_argv() -> None:
    spec = spec_of(shipped("k8s-baseline"))
    flags = launch_flags(spec)
    launch = server_launch(spec, flags, stack="k8s-baseline", name="sglang-k8s-baseline", port=30200)
    assert launch.kind == "Deployment" and launch.worker is None
    assert list(launch.leader.argv) == render_argv(flags.model_copy(update={"port": 30200}), "0.5.8")
    assert list(launch.leader.command) == ["python3", "-m", "sglang_emulator"]
    assert launch.leader.gpus == 8 and "--cuda-graph-max-bs" in launch.command
    # Another flag value is another launch; the same one, the same launch.
    other = flags.model_copy(update={"cuda_graph_max_bs": 128})
    assert server_launch(spec, flags, stack="k8s-baseline", name="n", port=30200).instance == launch.instance
    assert server_launch(spec, other, stack="k8s-baseline", name="n", port=30200).instance != launch.instance


def test_a_two_node_server_takes_its_rank_and_leader_from_leader_worker_set() -> None:
    sections = copy.deepcopy(shipped("k8s-baseline"))
    sections["host"]["cluster"] |= {"nodes": 2, "dist_init_port": 20300}
    sections["model"] = {"path": "/shared/kimi-k2.5-int4", "total_weights_gb": 578.64}
    sections["server"] |= {"tp_size": 16}
    spec = spec_of(sections)
    launch = server_launch(spec, launch_flags(spec), stack="k8s-two", name="sglang-k8s-two", port=30201)
    assert launch.kind == "LeaderWorkerSet" and launch.size == 2 and launch.gpus == 8
    assert launch.worker is not None
    leader, worker = list(launch.leader.argv), list(launch.worker.argv)

    def after(argv: list[str], option: str) -> str:
        return argv[argv.index(option) + 1]

    assert after(leader, "--nnodes") == after(worker, "--nnodes") == "2"
    assert after(leader, "--node-rank") == "0" and after(worker, "--node-rank") == "$(LWS_WORKER_INDEX)"
    assert (
        after(leader, "--dist-init-addr")
        == after(worker, "--dist-init-addr")
        == "$(LWS_LEADER_ADDRESS):20300"
    )
    assert launch.leader.probe and not launch.worker.probe  # only rank 0 serves HTTP
    # Preflight counts the GPUs of one pod and plans memory over the whole group.
    judged = cluster_spec(spec, node_facts(spec, [node(gpus=8)]))
    assert not [f for f in preflight.run_preflight(judged, "0.5.8") if f.severity == "error"]
