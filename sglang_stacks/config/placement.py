"""Where a stack runs: one host (``sglang-stacks:host``), a fleet of hosts (``fleet.hosts``) or a
fleet's pods on a Kubernetes cluster, and the sentence that says what is wrong with a stack that
mixes them."""

from __future__ import annotations

from sglang_stacks.config.fleet import FleetSpec
from sglang_stacks.config.sections import HostSpec

__all__ = ["fleet_placement_problem"]


def fleet_placement_problem(fleet: FleetSpec | None, host: HostSpec, host_declared: bool) -> str | None:
    """What is wrong with where a stack runs (``host`` is its ``sglang-stacks:host`` section,
    ``host_declared`` whether the stack file sets it), as a sentence with the fix; None when nothing.
    A stack without a fleet names its host's kind: the local emulator is never a silent default."""
    if fleet is None:
        if host_declared and "kind" in host.model_fields_set:
            return None
        return (
            "sglang-stacks:host.kind is missing: a stack names the host it runs on; add "
            "`sglang-stacks:host: {kind: emulator}` for the built-in SGLang emulator on this machine, or "
            "`kind: ssh` with the address, user, host_key and GPU facts of a real host "
            "(stacks/Pulumi.baseline.yaml has an example)"
        )
    if host.kind == "kubernetes":
        if fleet.hosts:
            return (
                "a fleet on a Kubernetes cluster runs its replicas as pods of the cluster sglang-stacks:host "
                "names; remove fleet.hosts and set fleet.replicas"
            )
        if fleet.nodes_per_replica > 1 or (host.cluster is not None and host.cluster.nodes > 1):
            return (
                "a fleet on a Kubernetes cluster runs each replica as one pod; multi-node replicas "
                "(fleet.nodes_per_replica or host.cluster.nodes above 1) are not supported there yet: "
                "remove them, or deploy the multi-node server as a stack without a fleet"
            )
        return None
    if host_declared:
        return (
            "a stack with a fleet lists its hosts in fleet.hosts; move the sglang-stacks:host section into "
            "fleet.hosts (one entry per host), or set its kind: kubernetes to run the replicas as pods"
        )
    if not fleet.hosts:
        return (
            "fleet.replicas without fleet.hosts runs the replicas as pods of a Kubernetes cluster: add a "
            "sglang-stacks:host section of kind: kubernetes, or list the hosts in fleet.hosts"
        )
    return None
