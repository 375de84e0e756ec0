"""A cluster's GPU facts, read from its nodes before anything is applied: ``nvidia.com/gpu`` capacity
(NVIDIA's device plugin advertises it) and the labels NVIDIA's GPU feature discovery publishes (the
GPU's product, memory, compute capability, driver). The stack's host section becomes these facts, so
preflight and the memory plan judge the GPUs a pod will get, as they judge an SSH host's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sglang_stacks.config.kube import ClusterSpec
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.errors import HostError, PreflightError
from sglang_stacks.hostops.facts import FoundFacts
from sglang_stacks.kube.client import ClusterAccess, api_error_text

__all__ = [
    "GPU_RESOURCE",
    "NodeFacts",
    "check_replicas_fit",
    "cluster_spec",
    "gpus_per_pod",
    "node_facts",
    "read_nodes",
]

GPU_RESOURCE = "nvidia.com/gpu"
"""The extended resource a GPU node advertises and a server pod requests."""
PRODUCT, MEMORY = "nvidia.com/gpu.product", "nvidia.com/gpu.memory"
MAJOR, MINOR = "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor"
DRIVER = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev")


@dataclass(frozen=True)
class NodeFacts:
    """One node as a GPU host: its name, its GPUs (``None`` fields when a label is missing)."""

    name: str
    labels: Mapping[str, str]
    gpus: int
    """``nvidia.com/gpu`` the node can give pods (allocatable; capacity when it reports none)."""

    @property
    def product(self) -> str | None:
        """The GPU's model, as nvidia-smi names it (GPU feature discovery writes ``-`` for spaces)."""
        label = self.labels.get(PRODUCT)
        return label.replace("-", " ") if label else None

    def facts(self, gpus: int, interconnect: str) -> FoundFacts | None:
        """The facts of ``gpus`` of this node's GPUs, or None when a label preflight needs is missing."""
        memory, major, minor = (self.labels.get(key) for key in (MEMORY, MAJOR, MINOR))
        if self.product is None or memory is None or major is None or minor is None:
            return None
        driver = ".".join(self.labels[key] for key in DRIVER if key in self.labels) or "unknown"
        return FoundFacts(
            gpu_model=self.product,
            gpu_count=gpus,
            memory_per_gpu_mib=int(memory),
            compute_capability=f"{major}.{minor}",
            interconnect=interconnect,
            driver_version=driver,
        )


def _gpus(node: Any) -> int:
    status = node.status
    found = (status.allocatable or {}).get(GPU_RESOURCE) or (status.capacity or {}).get(GPU_RESOURCE) or "0"
    return int(found)


def read_nodes(access: ClusterAccess) -> list[NodeFacts]:
    """Every node of the cluster with its labels and GPUs; HostError when the cluster does not answer."""
    try:
        nodes = access.core().list_node(_request_timeout=30).items
    except HostError:
        raise
    except Exception as error:  # the client raises urllib3's and its own errors alike
        raise HostError(
            f"{access.label} did not list its nodes ({api_error_text(error)}). Check that the cluster runs "
            "(`kubectl get nodes`) and that the kubeconfig's user may list nodes."
        ) from None
    return [NodeFacts(node.metadata.name, dict(node.metadata.labels or {}), _gpus(node)) for node in nodes]


def gpus_per_pod(spec: StackSpec) -> int:
    """The GPUs each server pod requests: declared, or the tensor-parallel ranks of one node."""
    cluster = spec.host.cluster
    assert cluster is not None  # a kubernetes host has a cluster section
    return cluster.gpus_per_pod or max(1, spec.tp_size // cluster.nodes)


def _matching(cluster: ClusterSpec, nodes: Sequence[NodeFacts]) -> tuple[list[NodeFacts], str]:
    """The nodes the server pods' node selector admits, and the selector as messages show it."""
    selector = cluster.selector()
    matching = [node for node in nodes if all(node.labels.get(k) == v for k, v in selector.items())]
    return matching, ", ".join(f"{key}={value}" for key, value in selector.items()) or "(none)"


def check_replicas_fit(spec: StackSpec, nodes: Sequence[NodeFacts], replicas: int) -> None:
    """PreflightError when the nodes the pods' selector admits cannot run ``replicas`` server pods at
    once (a fleet's), each with its GPUs."""
    cluster = spec.host.cluster
    assert cluster is not None
    wanted = gpus_per_pod(spec)
    matching, shown = _matching(cluster, nodes)
    room = sum(node.gpus // wanted for node in matching)
    if room < replicas:
        total = sum(node.gpus for node in matching)
        raise PreflightError(
            f"Preflight: the fleet's {replicas} replicas each request {wanted} {GPU_RESOURCE}, but the "
            f"nodes matching {shown} have room for {room} such pods ({total} {GPU_RESOURCE} in all). Lower "
            "fleet.replicas or the GPUs per pod (tp_size, host.cluster.gpus_per_pod), or select more "
            "nodes; nothing was applied."
        )


def node_facts(spec: StackSpec, nodes: Sequence[NodeFacts]) -> FoundFacts:
    """The facts of the GPUs one server pod gets, from the nodes its selector admits; PreflightError
    naming the selector and what the nodes have when no node can run the pod."""
    cluster = spec.host.cluster
    assert cluster is not None
    wanted = gpus_per_pod(spec)
    matching, shown = _matching(cluster, nodes)
    if not matching:
        products = sorted({node.labels.get(PRODUCT, "(no GPU label)") for node in nodes}) or ["(no node)"]
        raise PreflightError(
            f"Preflight: no node of {ClusterAccess.of(cluster).label} matches the node selector {shown}; "
            f"the nodes' GPUs are {', '.join(products)}. Fix sglang-stacks:host.cluster.gpu_product or "
            "node_selector, or label the GPU nodes; nothing was applied."
        )
    fitting = [node for node in matching if node.gpus >= wanted]
    if not fitting:
        most = max(node.gpus for node in matching)
        raise PreflightError(
            f"Preflight: each server pod requests {wanted} {GPU_RESOURCE} but the nodes matching {shown} "
            f"have at most {most}. Lower tp_size (or set host.cluster.nodes to spread it over several "
            "nodes), or select bigger nodes; nothing was applied."
        )
    for node in fitting:
        found = node.facts(wanted, spec.host.interconnect)
        if found is not None:
            return found
    raise PreflightError(
        f"Preflight: the nodes matching {shown} carry no GPU feature discovery labels ({PRODUCT}, "
        f"{MEMORY}, {MAJOR}, {MINOR}), so their GPUs cannot be checked. Run NVIDIA's GPU feature "
        "discovery on the cluster; nothing was applied."
    )


def cluster_spec(spec: StackSpec, found: FoundFacts) -> StackSpec:
    """``spec`` with its host's facts the cluster's, for preflight and the memory plan: the GPUs of
    one pod, and on a multi-node server the node flags that say how many pods share the server."""
    cluster: ClusterSpec | None = spec.host.cluster
    assert cluster is not None
    facts = found.model_dump(include={"gpu_model", "gpu_count", "memory_per_gpu_mib", "compute_capability"})
    host = spec.host.model_copy(update=facts)
    server = spec.server
    if cluster.nodes > 1:
        server = server.model_copy(
            update={
                "nnodes": cluster.nodes,
                "node_rank": 0,
                "dist_init_addr": f"leader:{cluster.dist_init_port}",
            }
        )
    return spec.model_copy(update={"host": host, "server": server})
