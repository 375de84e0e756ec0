"""A fleet: one configuration served by a replica on each of several hosts, behind SGLang's router,
rolled over the hosts in batches.

Per host it composes the single-host resources (probe, claim, environment, draft model, server,
benchmark) and a `RouterWorker` that puts the replica in the router. The order is Pulumi's
dependency graph: every replica of a batch waits for the previous batch to be back in the router
(and the second batch for the canary gate), so `pulumi up` replaces at most a batch at a time and
the router always has the other replicas to serve from. The canary gate takes one more replica, its
reference, out of the router while it measures both (the spec keeps another one serving).
"""

from __future__ import annotations

import sys
import uuid
from dataclasses import dataclass

import pulumi

from sglang_stacks.components import _fleet_preview
from sglang_stacks.components._fleet_parts import GateArgs, Replica, canary_gate
from sglang_stacks.components._host_parts import HostPlan, measured_server
from sglang_stacks.components.benchmark import Benchmark, BenchmarkArgs
from sglang_stacks.components.canary import CanaryGate
from sglang_stacks.components.multinode import build_replica_parts
from sglang_stacks.components.router import RouterArgs, RouterWorker, SGLangRouter, WorkerArgs
from sglang_stacks.config import preflight
from sglang_stacks.config.disaggregation import Role
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.errors import SpecError
from sglang_stacks.resources.resource import Args, args_for, register
from sglang_stacks.resources.wiring import (
    config_digest,
    connection_args,
    flags_digest,
    host_connection,
    launch_flags,
    warn_pending,
)
from sglang_stacks.results.outputs import FleetOutputs
from sglang_stacks.results.verdict import CanaryVerdict

FleetExports = args_for(FleetOutputs)
"""A fleet's outputs as it registers them: the fields of `FleetOutputs`, each an Output."""


@dataclass(frozen=True)
class FleetArgs:
    """What a fleet is made of: the stack's spec (with a ``fleet`` section) and its secrets."""

    stack: str
    spec: StackSpec
    ssh_private_key: pulumi.Output[str] | None = None
    """The key of the SSH hosts, a Pulumi secret; none when every host is an emulator host."""
    hub_token: pulumi.Output[str] | None = None


class Fleet(pulumi.ComponentResource):
    """Replicas on every host of the stack's fleet, behind SGLang's router, benchmarked through it."""

    outputs: Args[FleetOutputs]
    """The fleet's outputs, the fields of `FleetOutputs` (``__main__.py`` exports them as the stack's
    outputs)."""

    def __init__(self, name: str, args: FleetArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("sglang-stacks:index:Fleet", name, None, opts)
        spec, fleet = args.spec, args.spec.fleet
        warn_pending(args.stack, self)
        if fleet is None:
            raise SpecError("A Fleet needs a stack with a sglang-stacks:fleet section.")
        found = preflight.stack_findings(spec)
        preflight.raise_on_errors(found)
        for finding in found:
            if finding.severity == "warning":
                pulumi.log.warn(finding.sentence(), self)
        self._update_id = uuid.uuid4().hex[:12]
        self._config_digest = config_digest(spec)
        self._name, self._args = name, args
        key = args.ssh_private_key
        self._connections = [
            host_connection(connection_args(spec.for_host(i), key)) for i in range(len(fleet.hosts))
        ]
        if pulumi.runtime.is_dry_run():
            _fleet_preview.announce(self, spec, args.stack, self._connections)
        local = host_connection(None)
        router = SGLangRouter(
            f"{name}-router",
            RouterArgs(
                connection=local,
                python=sys.executable,
                release=fleet.router.release,
                host=fleet.router.host,
                port=fleet.router.port,
                metrics_port=fleet.router.metrics_port,
                policy=fleet.router.policy,
                health_check_interval_s=fleet.router.health_check_interval_s,
                log_path=f"{fleet.router.state_dir.rstrip('/')}/{args.stack}-router.log",
                pd_disaggregation=fleet.disaggregation is not None,
                stack=args.stack,
                state_dir=fleet.router.state_dir,
            ),
            pulumi.ResourceOptions(parent=self),
        )
        router_url = router.output(lambda o: o.url)
        replicas = self._roll(router)
        gate = self._gate
        flags = launch_flags(spec)
        through_router = Benchmark(
            f"{name}-benchmark",
            BenchmarkArgs(
                connection=local,
                stack=args.stack,
                python=sys.executable,
                url=router_url,
                server_instance=pulumi.Output.all(
                    *[r.server.output(lambda o: o.instance) for r in replicas]
                ).apply(lambda ids: "+".join(ids)),
                launch_command=replicas[0].server.output(lambda o: o.launch_command),
                sglang_version=spec.environment.sglang_release,
                flags_digest=flags_digest(flags),
                workload=spec.benchmark,
                state_dir=fleet.router.state_dir,
                update_id=self._update_id,
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[r.worker for r in replicas]),
        )
        levels = through_router.output(lambda o: o.levels)
        self.outputs = FleetExports(
            tok_s=levels.apply(lambda found: found[0].tok_s_mean),
            router_url=router_url,
            benchmark_levels=levels,
            replicas=pulumi.Output.all(*[replica.outputs() for replica in replicas]),
            canary=gate.output(lambda o: o.verdict) if gate else None,
            role_canaries=_verdicts(self._role_gates),
            launch_flags=flags,
            role_flags=fleet.disaggregation.role_flags(flags) if fleet.disaggregation else None,
            sglang_version=spec.environment.sglang_release,
        )
        register(self, self.outputs)

    def _roll(self, router: SGLangRouter) -> list[Replica]:
        """Every host's replica, batch after batch: each batch's servers wait until the previous
        batch is back in the router."""
        fleet = self._args.spec.fleet
        assert fleet is not None
        replicas: list[Replica] = []
        after: list[pulumi.Resource] = []  # what the next batch waits for
        environment_before: pulumi.Resource | None = None
        self._gate: CanaryGate | None = None
        self._role_gates: dict[Role, CanaryGate] = {}
        self._gates = GateArgs(self._args.stack, self._args.spec, router, self._config_digest)
        for batch in fleet.batches():
            built = []
            for index in batch:
                replica, environment_before = self._replica(index, router, after, environment_before)
                built.append(replica)
            replicas += built
            after = [replica.worker for replica in built]
        return replicas

    def _replica(
        self,
        index: int,
        router: SGLangRouter,
        after: list[pulumi.Resource],
        environment_before: pulumi.Resource | None,
    ) -> tuple[Replica, pulumi.Resource]:
        """Replica ``index``'s resources; its server waits for ``after`` (the previous batch)."""
        args = self._args
        assert args.spec.fleet is not None
        host = args.spec.fleet.replica_hosts(index)[0]  # a multi-node replica serves on rank 0
        name = f"{self._name}-host{host}"
        spec = args.spec.for_host(host)
        entry = args.spec.fleet.hosts[host]
        connection = self._connections[host]
        parts = build_replica_parts(
            self, args.spec, index, lambda node: self._plan(node, after, environment_before)
        )
        server, environment = parts.server, parts.environment
        instance = server.output(lambda o: o.instance)
        url = f"http://{entry.worker_address}:{parts.port}"
        fleet = args.spec.fleet
        roles = fleet.roles()
        role = roles[host]
        if role is not None or not fleet.benchmark_replicas:
            # A prefill or decode worker answers only its half of a request: it is measured through
            # the router, in pairs, with the fleet's benchmark (and so is every replica without
            # benchmarks of their own). Each role's first worker is its canary: judged in a pair
            # beside the role's second worker, both paired with the other role's first.
            waits: list[pulumi.Resource] = [server, router]
            of_role = [i for i, given in enumerate(roles) if given == role]
            if role is not None and fleet.rollout.canary and host == of_role[0]:
                partner = roles.index("decode" if role == "prefill" else "prefill")
                hosts = (host, of_role[1], partner)
                self._role_gates[role] = canary_gate(self, self._name, self._gates, instance, hosts, server)
                waits.append(self._role_gates[role])
            worker = self._worker(name, url, instance, router, waits, role, host)
            return Replica(index, server, None, worker, url, role), environment
        benchmark = Benchmark(
            f"{name}-benchmark",
            BenchmarkArgs(
                connection=connection,
                stack=args.stack,
                python=environment.output(lambda o: o.python),
                url=server.output(lambda o: o.url),
                server_instance=instance,
                launch_command=server.output(lambda o: o.launch_command),
                sglang_version=environment.output(lambda o: o.sglang_version),
                flags_digest=flags_digest(parts.launch_flags),
                workload=spec.benchmark,
                state_dir=spec.host.state_dir,
                update_id=self._update_id,
                server=measured_server(server, parts.port),
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[server]),
        )
        waits = [benchmark, router]
        batches = fleet.batches()
        if index == 0 and fleet.rollout.canary and len(batches) > 1:
            # Judged before it joins the router: a regressed canary never serves.
            reference = fleet.replica_hosts(batches[1][0])[0]
            self._gate = canary_gate(
                self, self._name, self._gates, instance, (host, reference, None), benchmark
            )
            waits.append(self._gate)
        worker = self._worker(name, url, instance, router, waits, None, host)
        return Replica(index, server, benchmark, worker, url), environment

    def _worker(
        self,
        name: str,
        url: str,
        instance: pulumi.Output[str],
        router: SGLangRouter,
        waits: list[pulumi.Resource],
        role: Role | None,
        host: int,
    ) -> RouterWorker:
        """Host ``host``'s server in the router (as a ``role`` worker in PD mode), after ``waits``."""
        fleet = self._args.spec.fleet
        assert fleet is not None
        return RouterWorker(
            f"{name}-worker",
            WorkerArgs(
                connection=host_connection(None),
                router_url=router.output(lambda o: o.url),
                worker_url=url,
                server_instance=instance,
                config_digest=self._config_digest,
                drain_timeout_s=fleet.router.drain_timeout_s,
                worker_type=role or "regular",
                bootstrap_port=fleet.bootstrap_ports().get(host),
            ),
            pulumi.ResourceOptions(parent=self, depends_on=waits),
        )

    def _plan(
        self, host: int, after: list[pulumi.Resource], environment_before: pulumi.Resource | None
    ) -> HostPlan:
        """Where host ``host``'s resources go; its server waits for ``after`` (the previous batch)."""
        args = self._args
        spec = args.spec.for_host(host)
        # Emulator hosts often share one machine: each gets its own (small) venv in its state folder,
        # so no host's install swaps a venv another host's server runs from. Real hosts share the
        # default one, installed one host at a time.
        emulated = spec.runtime == "emulator"
        return HostPlan(
            f"{self._name}-host{host}",
            args.stack,
            self._connections[host],
            self._update_id,
            hub_token=args.hub_token,
            venv_path=f"{spec.host.state_dir.rstrip('/')}/venv" if emulated else None,
            environment_after=[environment_before] if environment_before and not emulated else [],
            server_after=after,
        )


def _verdicts(gates: dict[Role, CanaryGate]) -> pulumi.Output[dict[Role, CanaryVerdict]] | None:
    """Each role's canary verdict (a disaggregated fleet's gates), or None without them."""
    if not gates:
        return None
    roles = list(gates)
    return pulumi.Output.all(*[gates[role].output(lambda o: o.verdict) for role in roles]).apply(
        lambda found: dict(zip(roles, found, strict=True))
    )
