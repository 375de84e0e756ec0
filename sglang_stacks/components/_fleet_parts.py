"""A fleet's replica: its resources (its server, its own benchmark, its place in the router) and
what the fleet's outputs say about it."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pulumi

from sglang_stacks.components._host_parts import DEFAULT_PORT
from sglang_stacks.components.benchmark import Benchmark, replica_outputs
from sglang_stacks.components.canary import CanaryArgs, CanaryGate
from sglang_stacks.components.router import RouterWorker, SGLangRouter
from sglang_stacks.components.server import SGLangServer
from sglang_stacks.config.disaggregation import Role
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.resources.wiring import host_connection
from sglang_stacks.results.outputs import ReplicaOutputs

__all__ = ["GateArgs", "Replica", "canary_gate", "host_url"]


@dataclass
class Replica:
    """One host's resources."""

    index: int
    server: SGLangServer
    benchmark: Benchmark | None
    """Its own benchmark; none for a prefill or decode worker, which serves only in a pair, and in
    a fleet measured through its router only (``fleet.benchmark_replicas: false``)."""
    worker: RouterWorker
    url: str
    role: Role | None = None

    def outputs(self) -> pulumi.Output[ReplicaOutputs]:
        """What the fleet's outputs say about this replica."""
        launch_command = self.server.output(lambda o: o.launch_command)
        return replica_outputs(self.index, self.url, launch_command, self.benchmark, self.role)


def host_url(spec: StackSpec, host: int) -> str:
    """Where the router reaches fleet host ``host``'s server."""
    assert spec.fleet is not None
    entry = spec.fleet.hosts[host]
    return f"http://{entry.worker_address}:{entry.server_port or spec.server.port or DEFAULT_PORT}"


@dataclass(frozen=True)
class GateArgs:
    """A fleet's canary gate: its stack, spec, router and the configuration the canary runs."""

    stack: str
    spec: StackSpec
    router: SGLangRouter
    config_digest: str


def canary_gate(
    parent: pulumi.Resource,
    name: str,
    gate: GateArgs,
    instance: pulumi.Output[str],
    hosts: tuple[int, int, int | None],
    after: pulumi.Resource,
) -> CanaryGate:
    """The gate on host ``hosts[0]``'s server (``instance``, measured once ``after`` is done) against
    host ``hosts[1]``'s; in a disaggregated fleet, both of one role, each paired with ``hosts[2]``,
    a worker of the other role."""
    spec = gate.spec
    fleet = spec.fleet
    assert fleet is not None
    canary, reference, partner = hosts
    role = fleet.roles()[canary]
    return CanaryGate(
        f"{name}-canary" if role is None else f"{name}-{role}-canary",
        CanaryArgs(
            connection=host_connection(None),
            stack=gate.stack,
            python=sys.executable,
            canary_url=host_url(spec, canary),
            canary_instance=instance,
            reference_url=host_url(spec, reference),
            workload=spec.benchmark,
            rollout=fleet.rollout,
            state_dir=fleet.router.state_dir,
            router_url=gate.router.output(lambda o: o.url),
            config_digest=gate.config_digest,
            drain_timeout_s=fleet.router.drain_timeout_s,
            role=role,
            partner_url=None if partner is None else host_url(spec, partner),
            bootstrap_ports={host_url(spec, i): port for i, port in fleet.bootstrap_ports().items()},
            router_release=fleet.router.release,
        ),
        pulumi.ResourceOptions(parent=parent, depends_on=[after]),
    )
