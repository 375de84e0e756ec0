"""The local Kubernetes cluster the Kubernetes tests and the demo run on (toolchain/local_cluster):
a real control plane and kubelet on 127.0.0.1 whose node shows the emulator profile's GPUs as a GPU
node does, the emulator's image served by a pod on the host's network at 127.0.0.1, the
LeaderWorkerSet controller with its webhooks, and a stop that leaves nothing behind (checked when
the session's cluster stops, tests/kube.py), even for the cluster of a test session that was killed."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from sglang_emulator.profile_loading import load_profile
from sglang_stacks.results.summary import read_document
from tests._ports import free_port
from tests._pulumi import ROOT
from toolchain.local_cluster import GPU_RESOURCE, Cluster
from toolchain.local_cluster.cluster import stop_orphans
from toolchain.local_cluster.start import TEMPORARY_PREFIX

pytestmark = pytest.mark.integration

EMULATOR_FLAGS = ["--model-path", "/shared/kimi-k2.5-int4", "--tp", "8", "--trust-remote-code"]


def _get(cluster: Cluster, *what: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(cluster.kubectl("get", *what, "--output=json").stdout)
    return result


def _apply(cluster: Cluster, *objects: dict[str, Any]) -> None:
    cluster.kubectl(
        "apply", "--filename=-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    )


def _ready_pods(cluster: Cluster, selector: str, count: int, timeout_s: float) -> list[dict[str, Any]]:
    """The pods ``selector`` selects once ``count`` of them are Ready (the cluster's state if not)."""
    deadline = time.monotonic() + timeout_s
    while True:
        pods = _get(cluster, "pods", f"--selector={selector}")["items"]
        ready = [
            pod
            for pod in pods
            if any(
                c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", [])
            )
        ]
        if len(ready) >= count:
            return ready
        state = cluster.kubectl("get", "pods,statefulsets,events", "--output=wide").stdout
        assert time.monotonic() < deadline, f"{len(ready)} of {count} pods Ready:\n{state}"
        time.sleep(0.5)


def _emulator_pod(cluster: Cluster, name: str, port: int, gpus: int) -> dict[str, Any]:
    flags = [*EMULATOR_FLAGS, "--host", "127.0.0.1", "--port", str(port)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "hostNetwork": True,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "server",
                    "image": cluster.emulator_image,
                    "command": ["python3", "-m", "sglang_emulator", *flags],
                    "env": [
                        {"name": "SGLANG_EMULATOR_TIME_SCALE", "value": "0.002"},
                        {"name": "SGLANG_EMULATOR_STATE_DIR", "value": "/tmp/emulator-state"},
                    ],
                    "resources": {"limits": {GPU_RESOURCE: str(gpus)}},
                    "readinessProbe": {
                        "httpGet": {"host": "127.0.0.1", "port": port, "path": "/health"},
                        "periodSeconds": 1,
                    },
                }
            ],
        },
    }


def _loadgen_job(cluster: Cluster, port: int) -> dict[str, Any]:
    flags = ["--url", f"http://127.0.0.1:{port}", "--input-len", "16", "--output-len", "8"]
    flags += ["--warmup-requests", "0", "--repetitions", "1", "--requests-per-repetition", "2"]
    container = {
        "name": "loadgen",
        "image": cluster.emulator_image,
        "command": ["python3", "-m", "loadgen", *flags],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "loadgen", "namespace": "default"},
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {"hostNetwork": True, "restartPolicy": "Never", "containers": [container]}},
        },
    }


def test_the_node_is_ready_at_127_0_0_1_and_shows_the_profiles_gpus(kube_cluster: Cluster) -> None:
    node = _get(kube_cluster, "node", kube_cluster.node_name)
    status, labels = node["status"], node["metadata"]["labels"]
    host = load_profile().host
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"
    assert {"type": "InternalIP", "address": "127.0.0.1"} in status["addresses"]
    assert status["nodeInfo"]["kubeletVersion"] == "v1.37.2"
    assert status["nodeInfo"]["containerRuntimeVersion"] == "containerd://2.2.0"
    assert (
        status["capacity"][GPU_RESOURCE] == status["allocatable"][GPU_RESOURCE] == str(host.gpu_count) == "8"
    )
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.memory"] == str(host.memory_total_mib)
    assert (labels["nvidia.com/gpu.compute.major"], labels["nvidia.com/gpu.compute.minor"]) == ("12", "0")
    assert labels["nvidia.com/gpu.family"] == "blackwell"
    assert labels["nvidia.com/cuda.driver-version.full"] == host.driver_version


def test_an_emulator_pod_on_the_hosts_network_serves_at_127_0_0_1(kube_cluster: Cluster) -> None:
    port, other_port = free_port(), free_port()
    _apply(kube_cluster, _emulator_pod(kube_cluster, "emulator", port, gpus=8))
    try:
        kube_cluster.kubectl("wait", "--for=condition=Ready", "pod/emulator", "--timeout=180s", timeout_s=200)
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)
        assert health.status_code == 200
        info = httpx.get(f"http://127.0.0.1:{port}/server_info", timeout=10).json()
        assert info["tp_size"] == 8
        pod = _get(kube_cluster, "pod", "emulator")
        assert pod["status"]["podIP"] == "127.0.0.1"
        assert pod["spec"]["nodeName"] == kube_cluster.node_name
        # The API server reads the pod's log from the kubelet (its client certificate, the node's CA).
        assert "sglang-emulator: emulating SGLang" in kube_cluster.kubectl("logs", "pod/emulator").stdout

        # The same image holds the load generator: a Job on the host's network measures the server.
        _apply(kube_cluster, _loadgen_job(kube_cluster, port))
        kube_cluster.kubectl(
            "wait", "--for=condition=Complete", "job/loadgen", "--timeout=120s", timeout_s=140
        )
        (level,) = read_document(kube_cluster.kubectl("logs", "job/loadgen").stdout).levels
        assert level.errors == 0 and level.completion_tokens == 2 * 8

        # The node's 8 GPUs are taken: the scheduler says so for a second server.
        _apply(kube_cluster, _emulator_pod(kube_cluster, "emulator-2", other_port, gpus=8))
        kube_cluster.kubectl(
            "wait", "--for=condition=PodScheduled=False", "pod/emulator-2", "--timeout=60s", timeout_s=80
        )
        conditions = _get(kube_cluster, "pod", "emulator-2")["status"]["conditions"]
        scheduled = next(c for c in conditions if c["type"] == "PodScheduled")
        assert scheduled["reason"] == "Unschedulable"
        assert f"Insufficient {GPU_RESOURCE}" in scheduled["message"]
    finally:
        kube_cluster.kubectl(
            "delete", "job/loadgen", "pod/emulator", "pod/emulator-2", "--ignore-not-found", "--wait=true"
        )


def test_a_leader_worker_set_makes_its_group_with_the_controllers_webhooks(kube_cluster: Cluster) -> None:
    sleeper = {
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "node",
                    "image": kube_cluster.emulator_image,
                    "command": ["python3", "-c", "import time; time.sleep(3600)"],
                }
            ],
        }
    }
    group = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "group", "namespace": "default"},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": sleeper}},
    }
    _apply(kube_cluster, group)
    try:
        # The controller makes the leader's StatefulSet, whose pod makes the workers' StatefulSet.
        pods = _ready_pods(kube_cluster, "leaderworkerset.sigs.k8s.io/name=group", count=2, timeout_s=180)
        indexes = sorted(
            pod["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] for pod in pods
        )
        assert indexes == ["0", "1"]
        # The pod webhook's work: every member learns the group's size and its leader's address.
        for pod in pods:
            env = {item["name"]: item.get("value") for item in pod["spec"]["containers"][0]["env"]}
            assert env["LWS_GROUP_SIZE"] == "2"
            assert env["LWS_LEADER_ADDRESS"].startswith("group-0.group.default")
        # Pods off the host's network get addresses on the cluster's own bridge.
        assert all(pod["status"]["podIP"].startswith("10.244.0.") for pod in pods)
    finally:
        kube_cluster.kubectl("delete", "leaderworkerset", "group", "--ignore-not-found", "--wait=true")


def test_a_cluster_whose_test_session_was_killed_is_stopped_by_the_next_start() -> None:
    # A session's own cluster (no folder given), started by a process that is then killed.
    program = (
        "import sys, time\n"
        "from tests._ports import free_port\n"
        "from toolchain.local_cluster import start_cluster\n"
        "cluster = start_cluster(free_port=free_port, leader_worker_set=False, images=False)\n"
        "print(cluster.folder, flush=True)\n"
        "time.sleep(600)\n"
    )
    session = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert session.stdout is not None
        folder = Path(session.stdout.readline().strip())
    finally:
        session.kill()
        session.wait()
    orphan = Cluster.load(folder)
    assert orphan.cgroup.pids(), "the cluster died with its session: there is nothing to show"
    assert folder in stop_orphans(Path(tempfile.gettempdir()), TEMPORARY_PREFIX)
    assert orphan.leftovers() == []
