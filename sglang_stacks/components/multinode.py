"""A replica of a fleet: one server on one host, or one SGLang server over several hosts
(``fleet.nodes_per_replica``), launched as SGLang launches one: the same command on every node
with ``--nnodes/--node-rank/--dist-init-addr``.

Every node has its host's resources as a one-host server has them (environment, probe, draft
model, claim, server) plus a check, before the claim, that the init address works from that host.
The nodes other than rank 0 are launched first, rank by rank, each started once it waits at the
rendezvous; rank 0 comes last and is ready only when every node joined and it serves. Each node's
refresh looks at the whole group, and rank 0 takes the other nodes' launches as an input, so a
dead node brings the whole group back together on the next ``pulumi up``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Annotated

import pulumi

from sglang_stacks.components._group import GroupMember
from sglang_stacks.components._host_parts import HostParts, HostPlan, NodeRole, build_host_parts
from sglang_stacks.components._refresh import HOST_READS
from sglang_stacks.config.multinode import node_place
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.hostops.init_address import check_init_address
from sglang_stacks.resources.provider import REPLACES, HostInputs, Props, TypedProvider
from sglang_stacks.resources.resource import Args, TypedResource, args_for

__all__ = ["InitAddressCheck", "build_replica_parts"]

STARTED_LINE = "Init torch distributed begin."
"""What a node other than rank 0 prints once it waits at the rendezvous (SGLang's and the emulator's)."""


class InitAddressInputs(HostInputs):
    """A node's host, and the init address it hosts (rank 0) or joins."""

    address: Annotated[str, REPLACES]
    """``HOST:PORT`` of rank 0's rendezvous."""
    node_rank: Annotated[int, REPLACES]


class InitAddressOutputs(Props):
    """What the host found."""

    verdict: str
    """``free``/``in-use`` (rank 0) or ``reachable listening|refused`` (another node)."""


class InitAddressProvider(TypedProvider[InitAddressInputs, InitAddressOutputs]):
    """Checks the init address from the host, through the host's own connection."""

    gathers_with = HOST_READS

    inputs = InitAddressInputs
    outputs = InitAddressOutputs

    def create_typed(self, inputs: InitAddressInputs) -> InitAddressOutputs:
        return InitAddressOutputs(
            verdict=check_init_address(inputs.connection, inputs.address, inputs.node_rank)
        )


InitAddressArgs = args_for(InitAddressInputs)
"""`InitAddressCheck`'s arguments: the fields of `InitAddressInputs`, each a value or an Output of one."""


class InitAddressCheck(
    TypedResource[InitAddressInputs, InitAddressOutputs], module="sglang", name="InitAddressCheck"
):
    """The init address of a multi-node server, checked from one of its hosts at deploy time."""

    def __init__(
        self, name: str, args: Args[InitAddressInputs], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(InitAddressProvider(), name, args, opts)


def build_replica_parts(
    parent: pulumi.Resource,
    spec: StackSpec,
    replica: int,
    plan_for: Callable[[int], HostPlan],
) -> HostParts:
    """Replica ``replica``'s resources; for a multi-node replica, its rank 0's parts (where it
    serves). ``plan_for(host)`` says where host ``host``'s resources go."""
    fleet = spec.fleet
    assert fleet is not None
    hosts = fleet.replica_hosts(replica)
    if len(hosts) == 1:
        return build_host_parts(parent, spec.for_host(hosts[0]), plan_for(hosts[0]))
    plans = {host: plan_for(host) for host in hosts}
    members = {host: _member(spec, host, plans[host]) for host in hosts}
    launched: list[HostParts] = []
    for host in [*hosts[1:], hosts[0]]:
        node_spec = spec.for_host(host)
        place = node_place(fleet, host)
        assert place is not None
        plan = plans[host]
        check = InitAddressCheck(
            f"{plan.name}-init-address",
            InitAddressArgs(
                connection=plan.connection, address=place.dist_init_addr, node_rank=place.node_rank
            ),
            pulumi.ResourceOptions(parent=parent),
        )
        others = [members[other] for other in hosts if other != host]
        role = NodeRole(
            ready_line=STARTED_LINE if place.node_rank else "",
            group=others,
            group_instances=[parts.server.output(lambda o: o.instance) for parts in launched]
            if not place.node_rank
            else [],
        )
        before = [parts.server for parts in launched]
        plan = dataclasses.replace(
            plan,
            claim_after=[*plan.claim_after, check],
            server_after=[*plan.server_after, *before],
            node=role,
        )
        launched.append(build_host_parts(parent, node_spec, plan))
    return launched[-1]


def _member(spec: StackSpec, host: int, plan: HostPlan) -> pulumi.Output[GroupMember]:
    """How another node's refresh reaches host ``host``: its connection, state folder and rank."""
    place = node_place(spec.fleet, host) if spec.fleet else None
    state_dir = spec.for_host(host).host.state_dir
    rank = place.node_rank if place else 0
    return pulumi.Output.from_input(plan.connection).apply(
        lambda connection: GroupMember(connection=connection, state_dir=state_dir, node_rank=rank)
    )
