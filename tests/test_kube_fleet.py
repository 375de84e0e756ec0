"""The shipped fleet on a cluster (stacks/Pulumi.k8s-fleet.yaml) on the real local Kubernetes cluster
of tests/kube.py, with the real Pulumi CLI, pulumi-kubernetes and `sglang-stacks rollout`: three
replicas as server pods behind SGLang's real router (a Deployment and a Service), deployed once for
the module, the hub token reaching every replica from a Secret; a change within noise rolls to every
replica behind the canary gate, and a far slower one (CUDA graphs off) is caught by the canary and
rolled back, its measurements said once, while two clients send requests through the router the
whole time and none fails; destroy leaves no object. Everything is reached at 127.0.0.1: the pods
use the host's network.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import yaml

from sglang_stacks.results.outputs import FleetOutputs
from tests._pulumi import Workspace
from tests._router import Load
from tests.kube import cluster_fleet_config, left_after_destroy

if TYPE_CHECKING:
    from toolchain.local_cluster import Cluster

pytestmark = pytest.mark.integration

STACK = "k8s-fleet"
MANAGED = "app.kubernetes.io/managed-by=sglang-stacks"
HUB_TOKEN = "hf_" + uuid.uuid4().hex  # a stand-in: nothing here reaches the hub


class ClusterFleet:
    """The deployed fleet, its namespace, and how to change it."""

    def __init__(self, workspace: Workspace, cluster: Cluster, namespace: str) -> None:
        self.workspace, self.cluster, self.namespace = workspace, cluster, namespace
        self.path = workspace.path / "stacks" / f"Pulumi.{STACK}.yaml"

    def config(self) -> dict[str, Any]:
        found: dict[str, Any] = yaml.safe_load(self.path.read_text())["config"]
        return found

    @property
    def router(self) -> str:
        return f"http://127.0.0.1:{self.config()['sglang-stacks:fleet']['router']['port']}"

    @property
    def ports(self) -> list[int]:
        first = self.config()["sglang-stacks:server"]["port"]
        return [first + i for i in range(3)]

    def set_server(self, **flags: Any) -> None:
        """Sets these server flags in the stack file, the rest of it as it is."""
        document = yaml.safe_load(self.path.read_text())
        document["config"]["sglang-stacks:server"].update(flags)
        self.path.write_text(yaml.safe_dump(document, sort_keys=False))

    def workers(self) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = httpx.get(f"{self.router}/workers", timeout=10).json()["workers"]
        return listed

    def served(self, name: str) -> list[Any]:
        """Launch flag ``name`` (its dest) on each replica, as its /get_server_info says."""
        return [
            httpx.get(f"http://127.0.0.1:{port}/get_server_info", timeout=10).json()[name]
            for port in self.ports
        ]

    def get(self, *what: str) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(
            self.cluster.kubectl("get", *what, "-n", self.namespace, "--output=json").stdout
        )
        return found

    def pods(self) -> list[str]:
        """Each replica's running pod's uid."""
        uids = []
        for index in range(3):
            listed = self.get("pods", "-l", f"app.kubernetes.io/instance=sglang-{STACK}-{index}")["items"]
            uids.append(
                next(p["metadata"]["uid"] for p in listed if not p["metadata"].get("deletionTimestamp"))
            )
        return uids

    def rollout(self) -> subprocess.CompletedProcess[str]:
        """`sglang-stacks rollout k8s-fleet`, run in the workspace as a user would."""
        return subprocess.run(
            [sys.executable, "-m", "sglang_stacks", "rollout", STACK],
            cwd=self.workspace.path,
            env=self.workspace.env(),
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
        )


def _config(cluster: Cluster, namespace: str, folder: str) -> str:
    """The shipped stack's config, pointed at the test's cluster, namespace, ports and folder."""
    config = cluster_fleet_config(STACK, cluster, namespace, folder, replicas=3)
    return yaml.safe_dump({"config": config}, sort_keys=False)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, kube_cluster: Cluster) -> Iterator[ClusterFleet]:
    folder = tmp_path_factory.mktemp("k8s-fleet")
    namespace = f"fleet-{uuid.uuid4().hex[:6]}"
    kube_cluster.kubectl("create", "namespace", namespace)
    workspace = Workspace.create(folder)
    workspace.extra_env["SGLANG_STACKS_HISTORY"] = str(folder / "history.sqlite")
    workspace.init_stack(STACK, _config(kube_cluster, namespace, str(folder / "state")))
    workspace.run("config", "set", "--secret", "hubToken", HUB_TOKEN, "-s", STACK)
    try:
        done = workspace.run("up", "--yes", "--skip-preview", "-s", STACK, timeout_s=900)
        assert HUB_TOKEN not in done.stdout + done.stderr
        yield ClusterFleet(workspace, kube_cluster, namespace)
    finally:
        # The last test destroys it; this one is for a test that failed before.
        workspace.run("destroy", "--yes", "--skip-preview", "-s", STACK, check=False, timeout_s=600)
        kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_the_shipped_cluster_fleet_serves_three_replica_pods_through_the_router(fleet: ClusterFleet) -> None:
    outputs = FleetOutputs.model_validate(fleet.workspace.outputs(STACK))
    workers = fleet.workers()
    assert sorted(w["url"] for w in workers) == [f"http://127.0.0.1:{port}" for port in fleet.ports]
    assert all(w["is_healthy"] for w in workers)
    assert len({w["metadata"].get("sglang_stacks_config") for w in workers} - {None}) == 1
    assert outputs.router_url == fleet.router and outputs.tok_s > 0
    port = fleet.config()["sglang-stacks:fleet"]["router"]["port"]
    assert outputs.router_service == f"http://sglang-{STACK}-router.{fleet.namespace}.svc:{port}"
    assert [r.host for r in outputs.replicas] == [0, 1, 2] and all(
        (r.tok_s or 0) > 0 for r in outputs.replicas
    )
    assert outputs.canary is not None and outputs.canary.passed  # the first deploy has nothing to judge
    # Each replica a Deployment of one pod on the host's network with one GPU, on its own port.
    for index, replica_port in enumerate(fleet.ports):
        pod = fleet.get("deployment", f"sglang-{STACK}-{index}")["spec"]["template"]["spec"]
        container = pod["containers"][0]
        assert pod["hostNetwork"] and container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
        assert container["args"][container["args"].index("--port") + 1] == str(replica_port)
    # Every replica reads the hub token from the stack's Secret; no spec, output or state holds it.
    secret = f"sglang-{STACK}-hub-token"
    assert base64.b64decode(fleet.get("secret", secret)["data"]["HF_TOKEN"]).decode() == HUB_TOKEN
    for index in range(3):
        deployment = fleet.get("deployment", f"sglang-{STACK}-{index}")
        (variable,) = [
            v
            for v in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
            if v["name"] == "HF_TOKEN"
        ]
        assert variable["valueFrom"] == {"secretKeyRef": {"name": secret, "key": "HF_TOKEN"}}
        assert HUB_TOKEN not in json.dumps(deployment)
    assert HUB_TOKEN not in json.dumps(fleet.get("pods"))
    assert HUB_TOKEN not in fleet.workspace.state_file(STACK).read_text()
    assert HUB_TOKEN not in json.dumps(fleet.workspace.outputs(STACK))
    # The router: a Deployment running sglang-router's launcher, and a Service in front of it.
    router = fleet.get("deployment", f"sglang-{STACK}-router")
    assert "sglang_router.launch_router" in router["spec"]["template"]["spec"]["containers"][0]["args"]
    service = fleet.get("service", f"sglang-{STACK}-router")["spec"]
    assert service["selector"] == router["spec"]["selector"]["matchLabels"]
    assert [(p["port"], p["targetPort"]) for p in service["ports"]] == [(port, port)]
    answer = httpx.post(
        f"{fleet.router}/generate",
        json={"text": "hello", "sampling_params": {"max_new_tokens": 4}},
        timeout=30,
    )
    assert answer.status_code == 200 and answer.json()["meta_info"]["completion_tokens"] == 4


def test_a_neutral_change_rolls_to_every_replica_behind_the_canary_under_load(fleet: ClusterFleet) -> None:
    before = fleet.pods()
    fleet.set_server(max_running_requests=64)  # one stream is measured: no change in speed
    previewed = fleet.workspace.run("preview", "--diff", "-s", STACK)
    preview = previewed.stdout + previewed.stderr  # the engine prints a program's notes on stderr
    order = preview[preview.index("rolls a change 1 replica(s) at a time") :]
    places = [
        order.index(part)
        for part in (
            "batch 1 (canary: replica 0 is benchmarked beside",
            "replica 0 (",
            "batch 2",
            "replica 1 (",
        )
    ]
    assert places == sorted(places), order
    assert order.count("+ --max-running-requests 64") == 3, order

    with Load(fleet.router) as load:
        time.sleep(1)
        rolled = fleet.rollout()
        time.sleep(1)

    said = rolled.stdout + rolled.stderr
    assert rolled.returncode == 0, said
    assert HUB_TOKEN not in said
    assert load.failed == [], load.none_failed()
    assert load.ok > 10
    after = fleet.pods()
    assert all(after[i] != before[i] for i in range(3))
    assert fleet.served("max_running_requests") == [64, 64, 64]
    assert sorted(w["url"] for w in fleet.workers()) == [f"http://127.0.0.1:{p}" for p in fleet.ports]
    canary = FleetOutputs.model_validate(fleet.workspace.outputs(STACK)).canary
    assert canary is not None and canary.passed and canary.change_pct is not None, canary
    print(f"neutral change on the cluster: {canary.line}")


def test_a_slower_change_is_caught_by_the_canary_and_rolled_back_under_load(fleet: ClusterFleet) -> None:
    before = fleet.pods()
    # Without CUDA graphs every decode step runs eagerly: the profile's step takes 7 ms more. (A
    # larger cuda_graph_max_bs would not do: its graphs are cut at the 64 request slots set above.)
    fleet.set_server(disable_cuda_graph=True)

    with Load(fleet.router) as load:
        time.sleep(1)
        rolled = fleet.rollout()
        time.sleep(1)

    said = rolled.stdout + rolled.stderr
    assert rolled.returncode == 1, said
    assert HUB_TOKEN not in said
    caught = re.search(
        rf"The canary of fleet {STACK} regressed: (canary ([0-9.]+) tok/s \(95 % CI [0-9.]+ to [0-9.]+\) "
        r"against [0-9.]+ tok/s .*?, (-[0-9.]+) % \(95 % CI .*?, beyond the 5 % tolerance)",
        said,
    )
    assert caught, said
    assert said.count(caught.group(1)) == 1, said  # said by the gate's error only
    assert "sglang-stacks-failure:" not in said
    assert f"rollout: the canary of {STACK} regressed, as its gate's error above says." in said
    assert "rolled back: all 3 replicas serve the configuration of the update of" in said, said
    print(f"slower change on the cluster: {caught.group(1)}")
    assert load.failed == [], load.none_failed()
    after = fleet.pods()
    assert after[0] != before[0] and after[1:] == before[1:]  # only the canary was touched
    assert fleet.served("disable_cuda_graph") == [False, False, False]
    assert all(w["is_healthy"] for w in fleet.workers()) and len(fleet.workers()) == 3


def test_destroy_leaves_no_pod_deployment_service_or_job(fleet: ClusterFleet) -> None:
    fleet.workspace.run("destroy", "--yes", "--skip-preview", "-s", STACK, timeout_s=600)
    kinds = "pods,jobs,configmaps,deployments,services,secrets"
    assert left_after_destroy(lambda: list(fleet.get(kinds, "-l", MANAGED)["items"])) == []
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{fleet.router}/workers", timeout=5)
