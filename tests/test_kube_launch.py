"""A kubernetes host in the stack spec, the cluster's GPU facts as preflight sees them, and the pods'
launch: SGLang's argv from the one renderer, a multi-node group's node flags as LeaderWorkerSet's
variables, the launch's digest; a fleet of replica pods as the spec and preview see it; the hub token
and a ShareGPT dataset as they reach the pods. The cluster itself is exercised in
tests/test_kube_deploy.py and tests/test_kube_fleet.py."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from sglang_loadgen.prompts import SHAREGPT_SAMPLE, read_sharegpt
from sglang_stacks.config import preflight
from sglang_stacks.config.render import render_argv
from sglang_stacks.config.spec import StackSpec, load_spec
from sglang_stacks.errors import BenchmarkError, PreflightError, SpecError
from sglang_stacks.hostops.serving import ServingNote
from sglang_stacks.kube.claim import ServerObject
from sglang_stacks.kube.dataset import DATASET_FILE, LIMIT_BYTES, sharegpt_sample
from sglang_stacks.kube.facts import NodeFacts, check_replicas_fit, cluster_spec, node_facts
from sglang_stacks.kube.fleet_preview import rollout_order
from sglang_stacks.kube.launch import server_launch
from sglang_stacks.resources.wiring import launch_flags
from tests._pulumi import ROOT
from tests.cluster_files import cluster_file
from tests.conftest import CLUSTER_SCOPE, _scope

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


# -- a fleet on a cluster ---------------------------------------------------------------------------


def test_the_shipped_fleet_runs_three_replica_pods_on_the_cluster_it_names() -> None:
    spec = spec_of(shipped("k8s-fleet"), "k8s-fleet")
    assert spec.fleet is not None and spec.fleet.hosts == []
    assert spec.fleet.replica_count == 3 and spec.fleet.batches() == [[0], [1], [2]]
    assert spec.host.cluster is not None and spec.tp_size == 1


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (
            {
                "hosts": [
                    {"kind": "emulator", "server_port": 30300 + i, "state_dir": f"~/h{i}"} for i in range(3)
                ]
            },
            "remove fleet.hosts and set fleet.replicas",
        ),
        ({"nodes_per_replica": 2}, "multi-node replicas (fleet.nodes_per_replica"),
        ({"replicas": None}, "set fleet.replicas and a sglang-stacks:host of kind: kubernetes"),
    ],
)
def test_a_wrong_fleet_on_a_cluster_is_named_with_its_fix(change: dict[str, Any], named: str) -> None:
    sections = shipped("k8s-fleet")
    sections["fleet"] = {
        key: value for key, value in {**sections["fleet"], **change}.items() if value is not None
    }
    with pytest.raises(SpecError, match=re.escape(named)):
        spec_of(sections, "k8s-fleet")


def test_replicas_without_a_cluster_are_named_with_the_fix() -> None:
    sections = shipped("k8s-fleet")
    del sections["host"]
    with pytest.raises(SpecError, match=r"fleet\.replicas without fleet\.hosts runs the replicas as pods"):
        spec_of(sections, "k8s-fleet")


def test_each_replica_serves_on_its_own_port_as_its_own_launch() -> None:
    spec = spec_of(shipped("k8s-fleet"), "k8s-fleet")
    flags = launch_flags(spec)
    launches = [
        server_launch(
            spec,
            flags.model_copy(update={"port": 30221 + i}),
            stack="k8s-fleet",
            name=f"f-{i}",
            port=30221 + i,
        )
        for i in range(3)
    ]
    assert [launch.leader.argv[launch.leader.argv.index("--port") + 1] for launch in launches] == [
        "30221",
        "30222",
        "30223",
    ]
    assert len({launch.instance for launch in launches}) == 3
    assert all(launch.gpus == 1 for launch in launches)


def test_the_nodes_must_have_room_for_every_replica() -> None:
    sections = shipped("k8s-fleet")
    sections["server"] = {**sections["server"], "tp_size": 4}
    spec = spec_of(sections, "k8s-fleet")
    node = NodeFacts("node-a", GPU_LABELS, gpus=8)
    with pytest.raises(
        PreflightError, match=r"3 replicas each request 4 nvidia.com/gpu, but .* room for 2 such pods"
    ):
        check_replicas_fit(spec, [node], 3)
    check_replicas_fit(spec, [node, NodeFacts("node-b", GPU_LABELS, gpus=4)], 3)  # 2 + 1 pods


def test_the_preview_says_the_rollout_order_and_each_replicas_flag_changes() -> None:
    spec = spec_of(shipped("k8s-fleet"), "k8s-fleet")
    flags = launch_flags(spec)
    launches = [
        server_launch(
            spec,
            flags.model_copy(update={"port": 30221 + i}),
            stack="k8s-fleet",
            name=f"f-{i}",
            port=30221 + i,
        )
        for i in range(3)
    ]
    old = flags.model_copy(update={"port": 30221, "cuda_graph_max_bs": 512})
    note = ServingNote(stack="k8s-fleet", pid=0, release="0.5.8", flags=old, launch_command="")
    objects = {"f-0": ServerObject("Deployment", "f-0", "k8s-fleet", 1, note)}
    said = rollout_order(spec, "k8s-fleet", launches, objects)
    assert said.splitlines()[:3] == [
        "Fleet k8s-fleet rolls a change 1 replica(s) at a time, each batch after the previous one is back "
        "in the router:",
        "  batch 1 (canary: replica 0 is benchmarked beside another replica of the router, which leaves the "
        "router for that benchmark, and judged before the rest proceeds):",
        "    replica 0 (Deployment/f-0, port 30221):",
    ]
    assert "~ --cuda-graph-max-bs 512 => 128" in said
    assert "replica 1 (Deployment/f-1, port 30222): not deployed; its pod would start" in said


# -- secrets and datasets reach the pods ------------------------------------------------------------


def test_the_hub_token_reaches_the_pods_from_a_secret_never_as_a_value() -> None:
    spec = spec_of(shipped("k8s-baseline"))
    flags = launch_flags(spec)
    plain = server_launch(spec, flags, stack="k8s-test", name="s", port=30200)
    hidden = server_launch(
        spec, flags, stack="k8s-test", name="s", port=30200, hub_token_secret="s-hub-token"
    )
    (variable,) = [v for v in hidden.leader.variables() if v.name == "HF_TOKEN"]
    assert variable.value is None
    assert variable.value_from.secret_key_ref.name == "s-hub-token"
    assert variable.value_from.secret_key_ref.key == "HF_TOKEN"
    assert all(v.name != "HF_TOKEN" for v in plain.leader.variables())
    assert hidden.instance != plain.instance  # a token given or taken away is a new launch


def test_the_dataset_sample_gives_the_pod_the_prompts_a_host_run_sends(tmp_path: Path) -> None:
    conversations = [
        {
            "conversations": [
                {"from": "human", "value": f"question {i} " * (i % 7 + 1)},
                {"from": "gpt", "value": f"answer {i}"},
            ]
        }
        for i in range(1500)
    ]
    conversations.insert(3, {"conversations": [{"from": "gpt", "value": "opens with the model: skipped"}]})
    source = tmp_path / "sharegpt.json"
    source.write_text(json.dumps(conversations))
    shipped_file = tmp_path / DATASET_FILE
    shipped_file.write_bytes(sharegpt_sample(str(source), seed=7))

    drawn = read_sharegpt(str(shipped_file), seed=7)
    assert drawn == read_sharegpt(str(source), seed=7)[:SHAREGPT_SAMPLE]
    assert len(drawn) == SHAREGPT_SAMPLE and shipped_file.stat().st_size < LIMIT_BYTES


def test_a_dataset_too_big_for_a_config_map_is_refused_naming_the_key(tmp_path: Path) -> None:
    noise = [
        {"conversations": [{"from": "human", "value": os.urandom(1500).hex()}, {"from": "gpt", "value": "a"}]}
        for _ in range(1000)
    ]
    source = tmp_path / "big.json"
    source.write_text(json.dumps(noise))
    with pytest.raises(
        BenchmarkError, match=r"sglang-stacks:benchmark.dataset_path: .* more than a ConfigMap holds"
    ):
        sharegpt_sample(str(source), seed=0)


# -- the suite ---------------------------------------------------------------------------------------


def test_every_test_file_on_the_cluster_runs_on_one_worker_first() -> None:
    # Each worker's session starts its own cluster: the files that use it are one scope.
    tests = Path(__file__).resolve().parent
    users = sorted(p.name for p in tests.glob("test_*.py") if "kube_cluster: Cluster" in p.read_text())
    assert {"test_kube_deploy.py", "test_kube_fleet.py", "test_local_cluster.py"} <= set(users)
    assert all(cluster_file(name) for name in users)
    assert _scope("tests/test_kube_fleet.py::a") == _scope("tests/test_local_cluster.py::b") == CLUSTER_SCOPE
    assert _scope("tests/test_fleet.py::c") == "tests/test_fleet.py"


# A suite of the same shape as this one, run by pytest-xdist with two workers: the suite's own hooks
# (tests/conftest.py) and cluster lock (tests/kube.py), and a ``kube_cluster`` that records each
# cluster's worker and lifetime instead of starting one (a real one takes seconds of both cores).
_SUITE = {
    "pytest.ini": "[pytest]\n",
    "conftest.py": """
        import json, os, time
        import pytest
        from tests.conftest import pytest_collection_modifyitems, pytest_xdist_make_scheduler
        from tests.kube import one_cluster_at_a_time

        def record(what, **fields):
            with open(os.environ["SUITE_RECORD"], "a") as out:
                worker = os.environ["PYTEST_XDIST_WORKER"]
                out.write(json.dumps({"what": what, "worker": worker, **fields}) + "\\n")

        @pytest.fixture(scope="session")
        def kube_cluster(tmp_path_factory):
            with one_cluster_at_a_time(tmp_path_factory):
                started = time.monotonic()
                time.sleep(0.5)  # a cluster starting
                yield
                stopped = time.monotonic()
            record("cluster", started=started, stopped=stopped)
    """,
    "test_kube_deploy.py": """
        import time
        from conftest import record

        def test_a(kube_cluster): record("test", file=__file__); time.sleep(0.3)
        def test_b(kube_cluster): record("test", file=__file__); time.sleep(0.3)
    """,
    "test_local_cluster.py": """
        import time
        from conftest import record

        def test_c(kube_cluster): record("test", file=__file__); time.sleep(0.3)
        def test_d(kube_cluster): record("test", file=__file__); time.sleep(0.3)
    """,
    "test_quick.py": "".join(f"def test_{i}(): pass\n" for i in range(6)),
}


def _run_suite(folder: Path, *options: str) -> list[dict[str, Any]]:
    folder.mkdir()
    for name, text in _SUITE.items():
        (folder / name).write_text(textwrap.dedent(text))
    record = folder / "record.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SUITE_RECORD": str(record)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", *options],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads(line) for line in record.read_text().splitlines()]


def test_the_suite_on_two_workers_runs_one_cluster_for_every_file_that_uses_it(tmp_path: Path) -> None:
    # As scripts/test.sh runs the suite: the files on the cluster are one worker's, one cluster.
    records = _run_suite(tmp_path / "loadfile", "--dist", "loadfile", "--no-loadscope-reorder")
    clusters = [r for r in records if r["what"] == "cluster"]
    tests = [r for r in records if r["what"] == "test"]
    assert len(clusters) == 1 and len(tests) == 4
    assert {r["worker"] for r in tests} == {clusters[0]["worker"]}


def test_two_workers_given_tests_on_the_cluster_run_their_clusters_one_after_the_other(
    tmp_path: Path,
) -> None:
    # Distributed test by test, both workers get tests on the cluster: the second worker's cluster
    # starts only once the first's has stopped.
    records = _run_suite(tmp_path / "load", "--dist", "load")
    clusters = sorted((r for r in records if r["what"] == "cluster"), key=lambda r: r["started"])
    assert len({r["worker"] for r in clusters}) == 2, clusters
    first, second = clusters
    assert first["stopped"] <= second["started"], clusters
