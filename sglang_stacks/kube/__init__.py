"""Kubernetes as a GPU host (``sglang-stacks:host`` with ``kind: kubernetes``).

What is applied to the cluster is pulumi-kubernetes's own resources (a Deployment or a
LeaderWorkerSet per server, a Job per benchmark, the router's Deployment and Service), built in
`workloads`, `router` and `jobs`; a fleet of server pods behind the router is `fleet`'s. What is
read from it (the nodes' GPU facts, a pod's scheduling and readiness, the benchmark's document in
its pod's log) goes through the Kubernetes Python client (`client`), with
the same kubeconfig and context the pulumi-kubernetes provider is given: pulumi-kubernetes has no
way to list nodes or read a log, and preflight must know the facts before any resource is declared.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_stacks._face import lazy_face

if TYPE_CHECKING:
    from sglang_stacks.kube.client import ClusterAccess as ClusterAccess
    from sglang_stacks.kube.deployment import KubeDeployment as KubeDeployment
    from sglang_stacks.kube.deployment import KubeDeploymentArgs as KubeDeploymentArgs
    from sglang_stacks.kube.facts import NodeFacts as NodeFacts
    from sglang_stacks.kube.facts import read_nodes as read_nodes
    from sglang_stacks.kube.fleet import KubeFleet as KubeFleet
    from sglang_stacks.kube.fleet import KubeFleetArgs as KubeFleetArgs


__all__, __getattr__, __dir__ = lazy_face(__name__)
