"""The shipped disaggregated fleet on a cluster (stacks/Pulumi.k8s-pd.yaml) on the real local
Kubernetes cluster of tests/kube.py, with the real Pulumi CLI and pulumi-kubernetes: one prefill and
two decode workers, each a Deployment of one emulator pod launched with its role's flags, behind
SGLang's real router in PD mode (a Deployment and a Service), benchmarked through it; destroy leaves
no object. Everything is reached at 127.0.0.1: the pods use the host's network.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import yaml

from sglang_stacks.results.outputs import FleetOutputs
from tests._ports import free_port
from tests._pulumi import Workspace
from tests.kube import cluster_fleet_config, left_after_destroy

if TYPE_CHECKING:
    from toolchain.local_cluster import Cluster

pytestmark = pytest.mark.integration

STACK = "k8s-pd"
ROLES = ["prefill", "decode", "decode"]


def _config(cluster: Cluster, namespace: str, folder: str) -> str:
    """The shipped stack's config, pointed at the test's cluster, namespace, ports and folder, and a
    free port for the prefill worker's bootstrap server."""
    config = cluster_fleet_config(STACK, cluster, namespace, folder, replicas=len(ROLES))
    config["sglang-stacks:fleet"]["disaggregation"]["bootstrap_port"] = free_port()
    return yaml.safe_dump({"config": config}, sort_keys=False)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory, kube_cluster: Cluster) -> Iterator[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("k8s-pd")
    namespace = f"pd-{uuid.uuid4().hex[:6]}"
    kube_cluster.kubectl("create", "namespace", namespace)
    workspace = Workspace.create(folder)
    workspace.extra_env["SGLANG_STACKS_HISTORY"] = str(folder / "history.sqlite")
    workspace.init_stack(STACK, _config(kube_cluster, namespace, str(folder / "state")))
    try:
        workspace.run("up", "--yes", "--skip-preview", "-s", STACK, timeout_s=900)
        config = yaml.safe_load((workspace.path / "stacks" / f"Pulumi.{STACK}.yaml").read_text())["config"]
        yield {"workspace": workspace, "cluster": kube_cluster, "namespace": namespace, "config": config}
    finally:
        workspace.run("destroy", "--yes", "--skip-preview", "-s", STACK, check=False, timeout_s=600)
        kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _deployment_args(deployed: dict[str, Any], index: int) -> list[str]:
    found = json.loads(
        deployed["cluster"]
        .kubectl("get", "deployment", f"sglang-{STACK}-{index}", "-n", deployed["namespace"], "--output=json")
        .stdout
    )
    args: list[str] = found["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def test_each_role_is_a_deployment_registered_by_role_with_the_router_in_pd_mode(
    deployed: dict[str, Any],
) -> None:
    config, workspace = deployed["config"], deployed["workspace"]
    first = config["sglang-stacks:server"]["port"]
    bootstrap = config["sglang-stacks:fleet"]["disaggregation"]["bootstrap_port"]
    router = f"http://127.0.0.1:{config['sglang-stacks:fleet']['router']['port']}"

    for index, role in enumerate(ROLES):
        args = _deployment_args(deployed, index)
        assert args[args.index("--disaggregation-mode") + 1] == role
        assert ("--disaggregation-bootstrap-port" in args) == (role == "prefill")
    prefill = _deployment_args(deployed, 0)
    assert prefill[prefill.index("--disaggregation-bootstrap-port") + 1] == str(bootstrap)
    listed = httpx.get(f"{router}/workers", timeout=10).json()["workers"]
    by_type = {w["url"]: w["worker_type"] for w in listed}
    assert by_type == {f"http://127.0.0.1:{first + i}": role for i, role in enumerate(ROLES)}
    outputs = FleetOutputs.model_validate(workspace.outputs(STACK))
    # Measured through the router's PD path: every request prefilled by one worker, decoded by another.
    assert outputs.tok_s > 0 and outputs.benchmark_levels[0].errors == 0
    assert [r.role for r in outputs.replicas] == ROLES and all(r.tok_s is None for r in outputs.replicas)
    assert outputs.role_flags is not None and outputs.role_flags["prefill"].disaggregation_mode == "prefill"
    decoded = httpx.get(f"http://127.0.0.1:{first + 1}/get_server_info", timeout=10).json()
    assert decoded["disaggregation_mode"] == "decode"


def test_destroy_leaves_no_object_of_the_fleet(deployed: dict[str, Any]) -> None:
    workspace = deployed["workspace"]
    workspace.run("destroy", "--yes", "--skip-preview", "-s", STACK, timeout_s=600)
    kinds, managed = (
        "pods,jobs,configmaps,deployments,services,secrets",
        "app.kubernetes.io/managed-by=sglang-stacks",
    )

    def listed() -> list[dict[str, Any]]:
        found = deployed["cluster"].kubectl(
            "get", kinds, "-l", managed, "-n", deployed["namespace"], "--output=json"
        )
        items: list[dict[str, Any]] = json.loads(found.stdout)["items"]
        return items

    assert left_after_destroy(listed) == []
