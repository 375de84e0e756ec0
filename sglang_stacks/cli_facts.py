"""The GPU facts ``sglang-stacks render`` judges a stack with, and where they come from: the emulator
host's, an SSH host's as its stack file declares them (a deployment checks them against nvidia-smi
first), or a cluster's as its nodes say them (read now, as a deployment reads them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sglang_stacks.config.spec import StackSpec
from sglang_stacks.errors import FlagError, HostError

__all__ = ["RenderedFacts", "cluster_render", "declared_facts"]


@dataclass(frozen=True)
class RenderedFacts:
    """The GPUs render judged the stack's configuration on."""

    source: str
    """Where the facts come from, as a phrase."""
    gpu_model: str
    gpu_count: int
    memory_per_gpu_mib: int
    compute_capability: str
    interconnect: str

    def line(self) -> str:
        """The facts in one line."""
        return (
            f"{self.gpu_count} x {self.gpu_model}, {self.memory_per_gpu_mib} MiB each, compute capability "
            f"{self.compute_capability}, {self.interconnect}"
        )

    def as_dict(self) -> dict[str, Any]:
        """The facts as render's JSON document holds them."""
        return asdict(self)


def declared_facts(spec: StackSpec) -> RenderedFacts:
    """The facts of a host that is not a cluster: the emulator's, or those its stack file declares."""
    host = spec.host
    source = (
        "the emulator host's"
        if host.kind == "emulator"
        else "declared in the stack file; pulumi up checks them against nvidia-smi first"
    )
    return RenderedFacts(
        source,
        host.gpu_model,
        host.gpu_count,
        host.memory_per_gpu_mib,
        host.compute_capability,
        host.interconnect,
    )


def cluster_render(
    stack: str, spec: StackSpec, replica: int, release: str
) -> tuple[StackSpec, RenderedFacts, list[str] | None, str | None]:
    """A stack on a cluster as render shows it: the spec judged with the GPUs a server pod gets (read
    from the cluster's nodes now; HostError when it does not answer, PreflightError when no node can
    run the pod), those facts, and the pod's argv and command (of replica ``replica`` in a fleet)."""
    from sglang_stacks.components.deployment import DEFAULT_PORT
    from sglang_stacks.kube.client import ClusterAccess
    from sglang_stacks.kube.deployment import object_name
    from sglang_stacks.kube.facts import check_replicas_fit, cluster_spec, node_facts, read_nodes
    from sglang_stacks.kube.launch import server_launch

    cluster = spec.host.cluster
    assert cluster is not None  # a kubernetes host has a cluster section
    access_spec = spec.model_copy(
        update={"environment": spec.environment.model_copy(update={"sglang_release": release})}
    )
    access = ClusterAccess.of(cluster)
    try:
        nodes = read_nodes(access)
    except HostError as error:
        raise HostError(
            f"render judges a stack on a cluster with its nodes' GPUs, and cannot read them: {error}"
        ) from None
    found = node_facts(spec, nodes)
    name = cluster.name or object_name(stack)
    if spec.fleet is not None:
        check_replicas_fit(spec, nodes, spec.fleet.replica_count)
        name = f"{name}-{replica}"
    port = (spec.server.port or DEFAULT_PORT) + (replica if spec.fleet is not None else 0)
    server = spec.server.model_copy(update={"port": port})
    fleet = spec.fleet
    role = fleet.roles()[replica] if fleet is not None else None
    if fleet is not None and fleet.disaggregation is not None and role is not None:
        # A worker of a disaggregated fleet launches with its role's flags.
        server = fleet.disaggregation.flags(server, role, fleet.bootstrap_ports().get(replica))
    single = access_spec.model_copy(update={"fleet": None, "server": server})
    try:
        launch = server_launch(single, single.launch_flags(), stack=stack, name=name, port=port)
        argv: list[str] | None = list(launch.leader.argv)
        command: str | None = launch.command
    except FlagError:
        argv = command = None  # the reasons are preflight errors already
    facts = RenderedFacts(
        f"read from the nodes of {access.label}: the GPUs one server pod gets",
        found.gpu_model,
        found.gpu_count,
        found.memory_per_gpu_mib,
        found.compute_capability,
        found.interconnect,
    )
    return cluster_spec(single, found), facts, argv, command
