"""Stacks on a real Kubernetes cluster (the local one of tests/kube.py, on 127.0.0.1), through the
real Pulumi engine and pulumi-kubernetes's provider: ``k8s-baseline`` deployed with ``tok_s`` as an
output and its hub token from a Secret, its pods' logs and its render from the nodes' facts; a flag
change previewed flag by flag and rolled forward, and back by the regression gate of a slower stack
that hands the namespace back (``sglang-stacks rollout``); compare and history on cluster stacks; a
pod the scheduler cannot place named with its reason; a two-node server as a LeaderWorkerSet,
measured on a ShareGPT file; a draft model on the node checked by sha256 before the server starts;
and a destroy that leaves no pod, Job, ConfigMap or Secret. The tests
share one cluster and build on each other's deployments, in order.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import yaml

from sglang_stacks.errors import ArtifactError, SchedulingError, failure_from_output
from sglang_stacks.exits import ExitCode
from sglang_stacks.hostops.artifacts import local_tree_digest
from sglang_stacks.hostops.command_folder import update_folder
from sglang_stacks.results.outputs import DeploymentOutputs
from tests._ports import free_port
from tests._pulumi import ROOT, Workspace
from tests.kube import left_after_destroy
from tests.test_transport import files_holding

if TYPE_CHECKING:
    from toolchain.local_cluster import Cluster

pytestmark = pytest.mark.integration

MANAGED = "app.kubernetes.io/managed-by=sglang-stacks"
HUB_TOKEN = "hf_" + uuid.uuid4().hex  # a stand-in: nothing here reaches the hub


def _config(cluster: Cluster, namespace: str, **changes: dict[str, Any]) -> str:
    """The shipped ``k8s-baseline`` stack's config, pointed at the test's cluster and namespace, with
    a free port, a quick start and a small benchmark; ``changes`` update its sections."""
    config = yaml.safe_load((ROOT / "stacks" / "Pulumi.k8s-baseline.yaml").read_text())["config"]
    sections = {key.removeprefix("sglang-stacks:"): value for key, value in config.items()}
    sections["host"]["cluster"] |= {
        "kubeconfig": str(cluster.kubeconfig),
        "context": cluster.context,
        "namespace": namespace,
        "image": cluster.emulator_image,
        "schedule_timeout_s": 20,
    }
    sections["environment"]["emulator"]["time_scale"] = 0.002
    sections["server"]["port"] = free_port()
    sections["benchmark"] |= {
        "input_len": 32,
        "output_len": 48,
        "repetitions": 3,
        "requests_per_repetition": 1,
    }
    sections["launch"] = {"ready_timeout_s": 180, "stop_timeout_s": 5}
    for section, values in changes.items():
        sections[section] = {**sections.get(section, {}), **values}
    return yaml.safe_dump({"config": {f"sglang-stacks:{k}": v for k, v in sections.items()}}, sort_keys=False)


def _get(cluster: Cluster, *what: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(cluster.kubectl("get", *what, "--output=json").stdout)
    return found


def _served_flags(url: str) -> dict[str, Any]:
    info: dict[str, Any] = httpx.get(f"{url}/server_info", timeout=10).json()
    return info


@contextlib.contextmanager
def _following(workspace: Workspace, stack: str) -> Iterator[Path]:
    """`sglang-stacks logs -f <stack>` running for the block, its output in the file it yields."""
    path = workspace.path / f"{stack}-logs-f.txt"
    with path.open("w") as out:
        follower = subprocess.Popen(
            workspace.cli_command("logs", "-f", stack), cwd=workspace.path, env=workspace.env(), stdout=out
        )
        try:
            yield path
        finally:
            follower.send_signal(signal.SIGINT)
            follower.wait(timeout=30)


@pytest.fixture(scope="module", autouse=True)
def began() -> float:
    """When the module's first test began: the files its tests wrote are newer."""
    return time.time()


@pytest.fixture(scope="module")
def namespaces(kube_cluster: Cluster) -> Iterator[tuple[str, str]]:
    """Two namespaces of their own: the one the tests' stacks share, and another for the stack that
    cannot be scheduled."""
    suffix = uuid.uuid4().hex[:6]  # a namespace an earlier session deletes may still be going
    names = (f"stacks-a-{suffix}", f"stacks-b-{suffix}")
    for name in names:
        kube_cluster.kubectl("create", "namespace", name)
    yield names
    for name in names:
        kube_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def kube_workspace(tmp_path_factory: pytest.TempPathFactory, kube_cluster: Cluster) -> Workspace:
    workspace = Workspace.create(tmp_path_factory.mktemp("kube"))
    workspace.extra_env["SGLANG_STACKS_HISTORY"] = str(workspace.backend / "history.sqlite")
    return workspace


@pytest.fixture(scope="module")
def baseline(
    kube_workspace: Workspace, kube_cluster: Cluster, namespaces: tuple[str, str]
) -> DeploymentOutputs:
    """``k8s-baseline`` deployed: the emulator's pod serving, benchmarked by a Job."""
    kube_workspace.init_stack("k8s-baseline", _config(kube_cluster, namespaces[0]))
    kube_workspace.run("config", "set", "--secret", "hubToken", HUB_TOKEN, "-s", "k8s-baseline")
    done = kube_workspace.run("up", "--yes", "--skip-preview", "-s", "k8s-baseline", timeout_s=900)
    assert HUB_TOKEN not in done.stdout + done.stderr
    return DeploymentOutputs.model_validate(kube_workspace.outputs("k8s-baseline"))


def test_k8s_baseline_deploys_to_the_cluster_with_tok_s_as_an_output(
    baseline: DeploymentOutputs, kube_cluster: Cluster, namespaces: tuple[str, str]
) -> None:
    assert baseline.tok_s > 0 and baseline.benchmark.tok_s_mean == baseline.tok_s
    assert baseline.launch_flags.cuda_graph_max_bs == 512
    # Preflight's facts are the node's: its advertised GPUs and GPU feature discovery's labels.
    assert baseline.host is not None and baseline.host.gpu_count == 8
    assert baseline.host.gpu_model == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert baseline.memory_plan is not None and baseline.memory_plan.verdict == "fits"
    deployment = _get(kube_cluster, "deployment", "-n", namespaces[0], "sglang-k8s-baseline")
    assert deployment["status"]["readyReplicas"] == 1
    pod = deployment["spec"]["template"]["spec"]
    assert pod["hostNetwork"] and pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert pod["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/health_generate"
    # The server answers on 127.0.0.1 (the pod is on the node's network), and its log is the pod's.
    port = baseline.launch_flags.port
    answer = httpx.post(
        f"http://127.0.0.1:{port}/generate",
        json={"text": "hello", "sampling_params": {"max_new_tokens": 4}},
        timeout=30,
    )
    assert answer.status_code == 200 and answer.json()["meta_info"]["completion_tokens"] == 4
    log = kube_cluster.kubectl(*baseline.server_log.removeprefix("kubectl ").split()).stdout
    assert "--cuda-graph-max-bs" in baseline.launch_command and "fired up" in log


def test_the_hub_token_reaches_the_server_from_a_secret_and_nowhere_in_plain_text(
    baseline: DeploymentOutputs, kube_workspace: Workspace, kube_cluster: Cluster, namespaces: tuple[str, str]
) -> None:
    namespace = namespaces[0]
    secret = _get(kube_cluster, "secret", "-n", namespace, "sglang-k8s-baseline-hub-token")
    assert base64.b64decode(secret["data"]["HF_TOKEN"]).decode() == HUB_TOKEN
    deployment = _get(kube_cluster, "deployment", "-n", namespace, "sglang-k8s-baseline")
    (variable,) = [
        v for v in deployment["spec"]["template"]["spec"]["containers"][0]["env"] if v["name"] == "HF_TOKEN"
    ]
    assert variable == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "sglang-k8s-baseline-hub-token", "key": "HF_TOKEN"}},
    }
    pod = baseline.server_log.split()[-1]
    assert (
        kube_cluster.kubectl("exec", "-n", namespace, pod, "--", "printenv", "HF_TOKEN").stdout.strip()
        == HUB_TOKEN
    )
    # Not in the pod spec, the state, the stack's outputs or its file.
    assert HUB_TOKEN not in json.dumps(deployment) + json.dumps(
        _get(kube_cluster, "pod", "-n", namespace, pod)
    )
    assert HUB_TOKEN not in kube_workspace.state_file("k8s-baseline").read_text()
    assert HUB_TOKEN not in json.dumps(kube_workspace.outputs("k8s-baseline"))
    assert HUB_TOKEN not in (kube_workspace.path / "stacks" / "Pulumi.k8s-baseline.yaml").read_text()


def test_logs_show_the_pods_and_render_judges_the_nodes_gpus(
    baseline: DeploymentOutputs, kube_workspace: Workspace
) -> None:
    shown = kube_workspace.cli("logs", "k8s-baseline", "-n", "200", check=True).stdout
    pod = baseline.server_log.split()[-1]
    assert f"==> server pod {pod} <==" in shown and "The server is fired up and ready to roll!" in shown
    # The benchmark Job's pod: its progress lines as sentences, not its document.
    assert "==> benchmark pod k8s-baseline-benchmark-job-" in shown
    assert "benchmark: concurrency 1, measure 3/3: 1 request," in shown
    assert '"schema"' not in shown
    assert HUB_TOKEN not in shown

    rendered = json.loads(kube_workspace.cli("render", "k8s-baseline", "--json", check=True).stdout)
    assert rendered["host_facts"]["source"].startswith("read from the nodes of the cluster of context")
    assert rendered["host_facts"]["gpu_count"] == 8 and rendered["host_facts"]["compute_capability"] == "12.0"
    assert rendered["command"] == baseline.launch_command  # the pod's command, as deployed


def test_a_flag_change_is_previewed_flag_by_flag_rolled_forward_and_handed_back_by_a_gate(
    baseline: DeploymentOutputs, kube_workspace: Workspace, kube_cluster: Cluster, namespaces: tuple[str, str]
) -> None:
    namespace = namespaces[0]
    kube_workspace.init_stack(
        "k8s-bs128", _config(kube_cluster, namespace, server={"cuda_graph_max_bs": 128})
    )
    previewed = kube_workspace.run("preview", "--diff", "-s", "k8s-bs128")
    preview = previewed.stdout + previewed.stderr  # the engine prints a program's notes on stderr
    assert "now serves k8s-baseline; deploying k8s-bs128 changes its launch flags" in preview
    assert "~ --cuda-graph-max-bs 512 => 128" in preview

    kube_workspace.run("up", "--yes", "--skip-preview", "-s", "k8s-bs128", timeout_s=900)
    forward = DeploymentOutputs.model_validate(kube_workspace.outputs("k8s-bs128"))
    assert forward.launch_flags.cuda_graph_max_bs == 128 and forward.tok_s > 0
    assert _served_flags(f"http://127.0.0.1:{forward.launch_flags.port}")["cuda_graph_max_bs"] == 128
    # The namespace's GPUs went to the new stack: the baseline's Deployment asks for no pod now.
    assert _get(kube_cluster, "deployment", "-n", namespace, "sglang-k8s-baseline")["spec"]["replicas"] == 0

    # Back: a stack more than twice slower (the custom all-reduce forced over PCIe) fails its gate
    # against the baseline, and `rollout` hands the namespace back with `pulumi up -s k8s-baseline`,
    # while `logs -f`, started before, shows the baseline's new pod from its first line.
    gate = {"baseline_stack": "k8s-baseline", "on_regression": "hand_back"}
    slower = _config(kube_cluster, namespace, server={"disable_custom_all_reduce": False}, gate=gate)
    kube_workspace.init_stack("k8s-slow", slower)
    with _following(kube_workspace, "k8s-baseline") as followed:
        rolled = kube_workspace.cli("rollout", "k8s-slow")
        back = DeploymentOutputs.model_validate(kube_workspace.outputs("k8s-baseline"))
        new_pod = back.server_log.split()[-1]
        ready = re.compile(rf"^\[{re.escape(new_pod)}\] .*The server is fired up and ready to roll!$", re.M)
        deadline = time.monotonic() + 60
        while not ready.search(followed.read_text()) and time.monotonic() < deadline:
            time.sleep(1)
    said = rolled.stdout + rolled.stderr
    assert rolled.returncode == ExitCode.REGRESSION, said
    regressed = re.search(r"k8s-slow ran at ([0-9.]+) tok/s, ([0-9.]+) % slower than k8s-baseline's", said)
    assert regressed and float(regressed.group(2)) > 40, said
    assert said.count(regressed.group(0)) == 1  # the gate's error says it once; rollout refers to it
    assert "rollout: handing the host back to k8s-baseline (on_regression: hand_back)" in said
    assert "rollout: k8s-baseline serves again at" in said
    assert new_pod != baseline.server_log.split()[-1] and back.tok_s > 0  # measured anew, on a new pod
    assert _served_flags(f"http://127.0.0.1:{back.launch_flags.port}")["cuda_graph_max_bs"] == 512
    for other in ("k8s-bs128", "k8s-slow"):
        assert _get(kube_cluster, "deployment", "-n", namespace, f"sglang-{other}")["spec"]["replicas"] == 0
    assert ready.search(followed.read_text()), followed.read_text()[-2000:]

    # Within one stack, the server's flags map changes key by key.
    kube_workspace.run(
        "config", "set", "--path", "sglang-stacks:server.cuda_graph_max_bs", "256", "-s", "k8s-baseline"
    )
    previewed = kube_workspace.run("preview", "--diff", "-s", "k8s-baseline")
    within = previewed.stdout + previewed.stderr
    assert re.search(r"~ cuda_graph_max_bs\s*: 512 => 256", within), within
    assert "~ --cuda-graph-max-bs 512 => 256" in within
    kube_workspace.run(
        "config", "set", "--path", "sglang-stacks:server.cuda_graph_max_bs", "512", "-s", "k8s-baseline"
    )


def test_compare_and_history_read_cluster_stacks_as_any_other(kube_workspace: Workspace) -> None:
    compared = kube_workspace.cli("compare", "k8s-baseline", "k8s-bs128", "--json")
    document = json.loads(compared.stdout)
    assert compared.returncode == ExitCode.OK, compared.stdout + compared.stderr  # 128 is not slower
    flags = {row["flag"]: row["values"] for row in document["flags"]}
    assert {stack: str(value) for stack, value in flags["--cuda-graph-max-bs"].items()} == {
        "k8s-baseline": "512",
        "k8s-bs128": "128",
    }
    tok_s = next(m for m in document["metrics"] if m["metric"] == "tok/s")
    assert set(tok_s["values"]) == {"k8s-baseline", "k8s-bs128"}
    recorded = kube_workspace.cli("history", "k8s-baseline", "k8s-slow", check=True).stdout
    assert "k8s-baseline" in recorded and "k8s-slow" in recorded


def test_a_pod_the_scheduler_cannot_place_is_named_with_its_reason(
    baseline: DeploymentOutputs, kube_workspace: Workspace, kube_cluster: Cluster, namespaces: tuple[str, str]
) -> None:
    # Another namespace is another stack's claim: the baseline keeps the node's 8 GPUs, and this
    # stack's pod, asking for 8 too, stays Pending.
    kube_workspace.init_stack("k8s-pending", _config(kube_cluster, namespaces[1]))
    failed = kube_workspace.run(
        "up", "--yes", "--skip-preview", "-s", "k8s-pending", check=False, timeout_s=600
    )
    said = failed.stdout + failed.stderr
    assert failed.returncode != 0
    error = failure_from_output(said)
    assert isinstance(error, SchedulingError), said
    assert "Insufficient nvidia.com/gpu" in error.scheduler_message
    assert "stayed Pending" in said
    kube_workspace.run("destroy", "--yes", "-s", "k8s-pending", timeout_s=300)


def test_a_two_node_server_runs_as_a_leader_worker_set_measured_on_a_sharegpt_file(
    baseline: DeploymentOutputs, kube_workspace: Workspace, kube_cluster: Cluster, namespaces: tuple[str, str]
) -> None:
    namespace = namespaces[0]
    group = {"nodes": 2, "gpus_per_pod": 4, "dist_init_port": free_port(), "leader_address": "127.0.0.1"}
    conversations = [
        {
            "conversations": [
                {"from": "human", "value": f"Question {i}: " + "why " * i},
                {"from": "gpt", "value": "Because."},
            ]
        }
        for i in range(1, 40)
    ]
    dataset = kube_workspace.path / "sharegpt.json"  # a file on this machine: the Job's pod gets it
    dataset.write_text(json.dumps(conversations))
    sharegpt = {"dataset": "sharegpt", "dataset_path": str(dataset)}
    config = yaml.safe_load(_config(kube_cluster, namespace, benchmark=sharegpt))["config"]
    config["sglang-stacks:host"]["cluster"] |= group
    kube_workspace.init_stack("k8s-two-nodes", yaml.safe_dump({"config": config}, sort_keys=False))
    kube_workspace.run("up", "--yes", "--skip-preview", "-s", "k8s-two-nodes", timeout_s=900)
    outputs = DeploymentOutputs.model_validate(kube_workspace.outputs("k8s-two-nodes"))
    assert outputs.tok_s > 0 and "--nnodes 2" in outputs.launch_command
    pods = _get(
        kube_cluster, "pods", "-n", namespace, "-l", "app.kubernetes.io/instance=sglang-k8s-two-nodes"
    )
    ranks = sorted(
        pod["spec"]["containers"][0]["args"][pod["spec"]["containers"][0]["args"].index("--node-rank") + 1]
        for pod in pods["items"]
    )
    assert ranks == ["$(LWS_WORKER_INDEX)", "0"]
    assert all(pod["status"]["phase"] == "Running" for pod in pods["items"])
    lws = _get(kube_cluster, "leaderworkerset", "-n", namespace, "sglang-k8s-two-nodes")
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert _served_flags(f"http://127.0.0.1:{outputs.launch_flags.port}")["nnodes"] == 2
    # The load generator read the ShareGPT sample from the ConfigMap mounted into the Job's pod.
    assert outputs.benchmark.errors == 0 and outputs.benchmark.requests == 3
    (job,) = _get(kube_cluster, "jobs", "-n", namespace, "-l", "sglang-stacks.io/stack=k8s-two-nodes")[
        "items"
    ]
    argv = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert (
        "--dataset=sharegpt" in argv and "--dataset-path=/opt/sglang-stacks/dataset/sharegpt.json.gz" in argv
    )


def test_a_draft_model_on_the_node_is_checked_by_sha256_before_the_server_starts(
    kube_workspace: Workspace, kube_cluster: Cluster, namespaces: tuple[str, str]
) -> None:
    # The local cluster's node is this machine: a folder here is a folder on the node. A
    # checkpoint's files are often links (a hub cache's into its blobs); only the folder is in the pod.
    folder = kube_workspace.path / "eagle3-on-the-node"
    wrong = "0" * 64
    draft = {"source": "host", "path_on_host": str(folder), "sha256": wrong, "weights_gb": 2.4}
    eagle = {
        "cuda_graph_max_bs": 128,
        "mem_fraction_static": 0.88,
        "speculative_algorithm": "EAGLE",
        "speculative_num_steps": 2,
        "speculative_eagle_topk": 4,
        "speculative_num_draft_tokens": 4,
    }
    config = _config(kube_cluster, namespaces[0], draftModel=draft, server=eagle)
    kube_workspace.init_stack("k8s-eagle3", config)

    def failed_up() -> str:
        failed = kube_workspace.run(
            "up", "--yes", "--skip-preview", "-s", "k8s-eagle3", check=False, timeout_s=600
        )
        said = failed.stdout + failed.stderr
        assert failed.returncode != 0 and isinstance(failure_from_output(said), ArtifactError), said
        return said

    said = failed_up()  # not on the node yet
    assert f"on node 127.0.0.1: the draft model's folder {folder} is not there" in said, said
    assert "Put the draft model at draftModel.path_on_host on every node" in said

    shutil.copytree(ROOT / "artifacts" / "eagle3-standin", folder)
    (folder / "config.json").rename(kube_workspace.path / "config-blob.json")
    (folder / "config.json").symlink_to(kube_workspace.path / "config-blob.json")
    said = failed_up()  # the same launch: a new pod checks what the node has now
    assert f"the draft model at {folder} has links to files outside it" in said, said
    assert "(./config.json); put the files themselves there" in said

    # A link within the folder is hashed as the file it points to, as over SSH.
    (folder / "blobs").mkdir()
    (kube_workspace.path / "config-blob.json").rename(folder / "blobs" / "config-blob.json")
    (folder / "config.json").unlink()
    (folder / "config.json").symlink_to(Path("blobs") / "config-blob.json")
    expected = local_tree_digest(folder).digest
    said = failed_up()
    assert f"the draft model at {folder} hashes to {expected}, not {wrong}" in said, said
    assert "fix draftModel.sha256" in said

    kube_workspace.run(
        "config", "set", "--path", "sglang-stacks:draftModel.sha256", expected, "-s", "k8s-eagle3"
    )
    kube_workspace.run("up", "--yes", "--skip-preview", "-s", "k8s-eagle3", timeout_s=900)
    outputs = DeploymentOutputs.model_validate(kube_workspace.outputs("k8s-eagle3"))
    served = _served_flags(f"http://127.0.0.1:{outputs.launch_flags.port}")
    assert served["speculative_draft_model_path"] == str(folder) and outputs.tok_s > 0
    pod = _get(
        kube_cluster, "pods", "-n", namespaces[0], "-l", "app.kubernetes.io/instance=sglang-k8s-eagle3"
    )["items"]
    assert [c["name"] for c in pod[0]["spec"]["initContainers"]] == ["draft-model-sha256"]


def test_destroy_leaves_no_pod_job_config_map_or_secret_and_no_key_in_the_temp_folder(
    began: float,
    tmp_path_factory: pytest.TempPathFactory,
    baseline: DeploymentOutputs,
    kube_workspace: Workspace,
    kube_cluster: Cluster,
    namespaces: tuple[str, str],
) -> None:
    stacks = ("k8s-two-nodes", "k8s-eagle3", "k8s-bs128", "k8s-slow", "k8s-baseline")
    with ThreadPoolExecutor(max_workers=len(stacks)) as destroying:  # stacks of their own: side by side
        list(
            destroying.map(
                lambda stack: kube_workspace.run("destroy", "--yes", "-s", stack, timeout_s=600), stacks
            )
        )
    kinds = "pods,jobs,configmaps,secrets,deployments,leaderworkersets"
    for namespace in namespaces:

        def listed(namespace: str = namespace) -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = _get(kube_cluster, kinds, "-n", namespace, "-l", MANAGED)["items"]
            return found

        assert left_after_destroy(listed) == []
    # Every update, preview and destroy above had the provider copy its kubeconfig into the temp
    # folder and the client load its key: no file there holds the key, raw or base64 (the copies
    # of the cluster's kubeconfig name its key file; the client's files went with their command).
    # Allowed to hold it: the cluster's own folder, this session's test folders (their kubeconfigs
    # are the tests' own) and this process's command folder while the process lives.
    key = Path(yaml.safe_load(kube_cluster.kubeconfig.read_text())["users"][0]["user"]["client-key"])
    secrets = (key.read_bytes(), base64.b64encode(key.read_bytes()))
    allowed = [kube_cluster.folder, tmp_path_factory.getbasetemp().parent, update_folder()]
    assert files_holding(secrets, began, roots=[tempfile.gettempdir()], skip=allowed) == []
