"""The cluster a ``kind: kubernetes`` host names: how to reach it, where its pods go and what they run.

The GPU facts (count, model, memory, compute capability) are not declared here: they are read from
the cluster's nodes before anything is applied (`sglang_stacks.kube.facts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, field_validator

from sglang_stacks.config.docstrings import FileSection

__all__ = ["ClusterSpec", "host_problems"]

# A label key (an optional DNS prefix and a name) and a label value, as Kubernetes accepts them.
_LABEL_KEY = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
_LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class ClusterSpec(FileSection):
    """A Kubernetes cluster as a GPU host: each server a pod on the host's network (a Deployment, or
    a LeaderWorkerSet over several nodes), the benchmark a Job, all applied through pulumi-kubernetes."""

    kubeconfig: str | None = Field(default=None, min_length=1, pattern=r"^[^\x00-\x1f\x7f]+$")
    """The kubeconfig file on this machine (``~`` allowed); default ``$KUBECONFIG``, else
    ``~/.kube/config``."""
    context: str | None = Field(default=None, min_length=1, pattern=r"^[^\x00-\x1f\x7f]+$")
    """The kubeconfig context; default its current context."""
    namespace: str = Field(default="default", max_length=63, pattern=_DNS_LABEL)
    """The namespace of the server, router and benchmark objects (it must exist)."""
    name: str | None = Field(default=None, max_length=40, pattern=_DNS_LABEL)
    """The name of the server's Deployment or LeaderWorkerSet (and the prefix of the benchmark's
    Job); default ``sglang-<stack>``."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    """Labels a node must carry to run the server (the pod's ``nodeSelector``)."""
    gpu_product: str | None = Field(default=None, pattern=_LABEL_VALUE, max_length=63)
    """The GPU model the nodes must have, as NVIDIA's GPU feature discovery labels it
    (``nvidia.com/gpu.product``, spaces as ``-``); added to the node selector."""
    gpus_per_pod: int | None = Field(default=None, ge=1, le=64)
    """``nvidia.com/gpu`` each server pod requests; default ``tp_size`` over ``nodes``."""
    nodes: int = Field(default=1, ge=1, le=64)
    """Nodes one server spans: above 1 it is a LeaderWorkerSet of that group size, launched with
    SGLang's ``--nnodes/--node-rank/--dist-init-addr``."""
    dist_init_port: int = Field(default=20000, ge=1, le=65535)
    """The port of the group leader's rendezvous (``--dist-init-addr <leader>:<port>``)."""
    leader_address: str | None = Field(default=None, pattern=r"^[A-Za-z0-9.:_-]+$")
    """The address a multi-node group's pods reach its leader at; default LeaderWorkerSet's
    ``LWS_LEADER_ADDRESS``, the leader pod's DNS name (it needs the cluster's DNS). A cluster without
    DNS whose groups fit on one node (the local test cluster) can name ``127.0.0.1``: the group's
    pods share that node's network."""
    image: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$")
    """The container image that runs SGLang (or the project's emulator) and the load generator."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    """When the kubelet pulls the image; ``Never`` for an image imported into the node's runtime."""
    python: str = Field(default="python3", min_length=1, pattern=r"^[A-Za-z0-9_./-]+$")
    """The image's Python, which runs the server's launcher and the load generator."""
    schedule_timeout_s: float = Field(default=120.0, gt=0)
    """How long a server pod may stay Pending before the update stops, naming the scheduler's reason."""

    @field_validator("node_selector")
    @classmethod
    def _labels(cls, selector: dict[str, str]) -> dict[str, str]:
        import re

        bad = [f"{key}={value!r}" for key, value in selector.items() if not re.match(_LABEL_KEY, key)]
        bad += [f"{key}={value!r}" for key, value in selector.items() if not re.match(_LABEL_VALUE, value)]
        if bad:
            raise ValueError(
                f"{', '.join(bad)} are not Kubernetes labels; keys are [prefix/]name and values letters, "
                "digits, - _ . (at most 63 characters)"
            )
        return selector

    def selector(self) -> dict[str, str]:
        """The node selector of the server's pods: the declared labels and the GPU model's."""
        product = {"nvidia.com/gpu.product": self.gpu_product} if self.gpu_product else {}
        return {**self.node_selector, **product}


def host_problems(
    kind: str, cluster: ClusterSpec | None, ssh: Sequence[str], facts: Sequence[str]
) -> list[str]:
    """What is wrong with a host section of ``kind`` for its use of ``cluster``, given the SSH fields
    (``ssh``) and GPU facts (``facts``) it sets: a cluster host has its facts read from the nodes and
    reaches no SSH host; other kinds name no cluster."""
    if kind != "kubernetes":
        if cluster is None:
            return []
        return ["cluster applies to kind: kubernetes only; remove it or set kind: kubernetes"]
    if cluster is None:
        return ["a kubernetes host needs a cluster section (at least cluster.image, the image its pods run)"]
    problems = []
    if ssh:
        problems.append(f"{', '.join(ssh)} apply to kind: ssh only; remove them")
    if facts:
        problems.append(
            f"{', '.join(facts)} are read from the cluster's nodes (capacity nvidia.com/gpu and the GPU "
            "feature discovery labels); remove them, and select nodes with cluster.gpu_product or "
            "cluster.node_selector"
        )
    return problems
