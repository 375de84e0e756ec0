"""A fleet on a Kubernetes cluster: replicas of one configuration as server pods behind SGLang's
router (a Deployment and a Service), rolled batch by batch behind the canary gate as a fleet of hosts
is (`sglang_stacks.components.fleet`).

Replica i is a Deployment of one pod serving on ``server.port + i`` (pods on the host's network share
their node's ports). A change of its launch replaces the Deployment, never updates it in place, and
Pulumi then deletes what depends on it first: the replica's registration with the router (which drains
it), its wait and its benchmark, so a replica leaves the router before its pod stops and comes back
only once its new pod is ready and measured. Each batch waits for the previous one to be back in the
router; the first replica is the canary, judged beside another replica before it joins. The fleet's
tok/s is the benchmark Job through the router once every replica is in it.

The router's worker API, each replica's own benchmark and the canary gate are reached from the machine
that runs ``pulumi up``, at the pods' addresses (their nodes', on the host's network), as for a fleet
of hosts; the Service is where clients inside the cluster send requests.
"""

from __future__ import annotations

import sys
import uuid
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from sglang_stacks.components.benchmark import Benchmark, BenchmarkArgs
from sglang_stacks.components.canary import CanaryArgs, CanaryGate
from sglang_stacks.components.deployment import DEFAULT_PORT
from sglang_stacks.components.fleet import FleetExports
from sglang_stacks.components.router import RouterWorker, WorkerArgs
from sglang_stacks.config.flags import ServerFlags
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.errors import SpecError
from sglang_stacks.kube import fleet_preview, jobs, workloads
from sglang_stacks.kube.client import ClusterAccess
from sglang_stacks.kube.deployment import cluster_preflight, object_name
from sglang_stacks.kube.fleet_replica import KubeReplica
from sglang_stacks.kube.footing import lay_footing
from sglang_stacks.kube.launch import server_launch
from sglang_stacks.kube.router import fleet_router
from sglang_stacks.kube.server import KubeServer, KubeServerArgs
from sglang_stacks.resources.resource import Args, register
from sglang_stacks.resources.wiring import config_digest, digest, flags_digest, host_connection, launch_flags
from sglang_stacks.results.outputs import FleetOutputs

__all__ = ["KubeFleet", "KubeFleetArgs"]


@dataclass(frozen=True)
class KubeFleetArgs:
    """What a fleet on a cluster is made of: the stack's name, its spec (a kubernetes host and a
    fleet section with ``replicas``) and the hub token."""

    stack: str
    spec: StackSpec
    hub_token: pulumi.Output[str] | None = None
    """A Hugging Face token for gated models, a Pulumi secret: a Kubernetes Secret the server pods
    read as HF_TOKEN."""


class KubeFleet(pulumi.ComponentResource):
    """Replicas of the stack's server as pods of a cluster, behind SGLang's router, benchmarked
    through it; the outputs are a fleet's (`FleetOutputs`)."""

    outputs: Args[FleetOutputs]
    """The fleet's outputs, the fields of `FleetOutputs`."""

    def __init__(self, name: str, args: KubeFleetArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("sglang-stacks:index:KubeFleet", name, None, opts)
        spec, stack, fleet, cluster = args.spec, args.stack, args.spec.fleet, args.spec.host.cluster
        if fleet is None or cluster is None:
            raise SpecError(
                "A KubeFleet needs a stack with a kubernetes host and a sglang-stacks:fleet section."
            )
        access = ClusterAccess.of(cluster)
        cluster_preflight(spec, access, self)
        base, port, flags = (
            cluster.name or object_name(stack),
            spec.server.port or DEFAULT_PORT,
            launch_flags(spec),
        )
        token = f"{base}-hub-token" if args.hub_token is not None else None
        self._args = args
        self._roles, self._bootstrap_ports = fleet.roles(), fleet.bootstrap_ports()
        self._launches = [
            server_launch(
                spec,
                self._replica_flags(flags.model_copy(update={"port": port + i}), i),
                stack=stack,
                name=f"{base}-{i}",
                port=port + i,
                hub_token_secret=token,
            )
            for i in range(fleet.replica_count)
        ]
        if pulumi.runtime.is_dry_run():
            fleet_preview.announce(self, access, spec, stack, self._launches)
        self._name, self._args, self._access = name, args, access
        self._update_id, self._config_digest = uuid.uuid4().hex[:12], config_digest(spec)
        self._state_dir = f"{fleet.router.state_dir.rstrip('/')}/{stack}"
        footing = lay_footing(
            self, name, access=access, stack=stack, spec=spec, secret_name=token, hub_token=args.hub_token
        )
        self._child, self._claimed, self._before = footing.child, footing.claimed, footing.before
        self._router = fleet_router(name, stack, f"{base}-router", spec, access, self, self._child)
        self._files = jobs.benchmark_files(name, stack, spec, self._child)
        self._gate: CanaryGate | None = None
        replicas = self._roll()
        router_url = self._router.output(lambda o: o.url)
        measured = pulumi.Output.all(
            self._router.output(lambda o: o.pod_uid),
            *[r.server.output(lambda o: o.pod_uid) for r in replicas],
        ).apply(lambda uids: digest({"router": uids[0], "replicas": uids[1:]}))
        through_router = jobs.measure(
            f"{name}-benchmark",
            stack=stack,
            spec=spec,
            access=access,
            files=self._files,
            measured=jobs.Measured(
                url=router_url,
                instance=measured,
                launch_command=self._launches[0].command,
                flags_digest=flags_digest(flags),
                gpus=self._launches[0].gpus * len(replicas),
            ),
            parent=self,
            child=self._child,
            after=[replica.worker for replica in replicas],
        )
        levels = through_router.output(lambda o: o.levels)
        self.outputs = FleetExports(
            tok_s=levels.apply(lambda measured: measured[0].tok_s_mean),
            router_url=router_url,
            router_service=f"http://{base}-router.{access.namespace}.svc:{fleet.router.port}",
            benchmark_levels=levels,
            replicas=pulumi.Output.all(*[replica.outputs() for replica in replicas]),
            canary=self._gate.output(lambda o: o.verdict) if self._gate else None,
            launch_flags=flags,
            role_flags=fleet.disaggregation.role_flags(flags) if fleet.disaggregation else None,
            sglang_version=spec.environment.sglang_release,
        )
        register(self, self.outputs)

    def _replica_flags(self, flags: ServerFlags, index: int) -> ServerFlags:
        """Replica ``index``'s flags: ``flags``, with a disaggregated fleet's role flags (a prefill
        worker's own bootstrap port: pods share their nodes' ports)."""
        fleet, role = self._args.spec.fleet, self._roles[index]
        if fleet is None or fleet.disaggregation is None or role is None:
            return flags
        return fleet.disaggregation.flags(flags, role, self._bootstrap_ports.get(index))

    def _roll(self) -> list[KubeReplica]:
        """Every replica, batch after batch: each batch's Deployments wait until the previous batch
        is back in the router."""
        fleet = self._args.spec.fleet
        assert fleet is not None
        replicas: list[KubeReplica] = []
        after: list[pulumi.Resource] = []
        for batch in fleet.batches():
            built = [self._replica(index, after) for index in batch]
            replicas += built
            after = [replica.worker for replica in built]
        return replicas

    def _replica(self, index: int, after: list[pulumi.Resource]) -> KubeReplica:
        """Replica ``index``: its Deployment (after ``after``), the wait for its pod, its own benchmark,
        the canary gate for the first one, and its registration with the router."""
        spec, stack, name = self._args.spec, self._args.stack, f"{self._name}-replica{index}"
        fleet, cluster = spec.fleet, spec.host.cluster
        assert fleet is not None and cluster is not None
        launch = self._launches[index]
        annotations = self._claimed.apply(
            lambda claim_id: {
                **workloads.server_annotations(launch.note, claim_id),
                **workloads.DELETED_AT_ONCE,
            }
        )
        deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            workloads.server_deployment(launch.name, launch.leader, launch.labels, annotations),
            opts=pulumi.ResourceOptions.merge(
                self._child,
                # Replaced, not updated, when its pods change: what depends on it goes first.
                pulumi.ResourceOptions(
                    depends_on=[*self._before, *after],
                    delete_before_replace=True,
                    replace_on_changes=["spec"],
                ),
            ),
        )
        server = KubeServer(
            f"{name}-server",
            KubeServerArgs(
                access=self._access,
                stack=stack,
                # From the Deployment's own output: its replacement replaces this wait, and what
                # depends on it, before the Deployment goes.
                workload=deployment.metadata.apply(lambda meta: f"Deployment/{meta.name}"),
                instance=launch.instance,
                flags=launch.flags,
                release=spec.environment.sglang_release,
                launch_command=launch.command,
                port=launch.port,
                # A new pod waits for its predecessor to stop: they share the node's port.
                schedule_timeout_s=cluster.schedule_timeout_s + spec.launch.stop_timeout_s,
                ready_timeout_s=spec.launch.ready_timeout_s,
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[deployment]),
        )
        url, pod_uid = server.output(lambda o: o.url), server.output(lambda o: o.pod_uid)
        role = self._roles[index]
        if role is not None:
            # A prefill or decode worker answers only its half of a request: measured through the
            # router, in pairs, with the fleet's benchmark.
            worker = self._worker(name, url, pod_uid, [server, self._router], index)
            return KubeReplica(index, launch, server, None, worker, role)
        benchmark = Benchmark(
            f"{name}-benchmark",
            BenchmarkArgs(
                connection=host_connection(None),
                stack=stack,
                python=sys.executable,
                url=url,
                server_instance=pod_uid,
                launch_command=launch.command,
                sglang_version=spec.environment.sglang_release,
                flags_digest=flags_digest(launch.flags),
                workload=spec.benchmark,
                state_dir=f"{self._state_dir}/replica{index}",
                update_id=self._update_id,
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[server]),
        )
        waits: list[pulumi.Resource] = [benchmark, self._router]
        batches = fleet.batches()
        if index == batches[0][0] and fleet.rollout.canary and len(batches) > 1:
            # Judged before it joins the router: a regressed canary never serves.
            self._gate = CanaryGate(
                f"{self._name}-canary",
                CanaryArgs(
                    connection=host_connection(None),
                    stack=stack,
                    python=sys.executable,
                    canary_url=url,
                    canary_instance=pod_uid,
                    reference_url="",  # any replica of the router on the current configuration
                    workload=spec.benchmark,
                    rollout=fleet.rollout,
                    state_dir=self._state_dir,
                    router_url=self._router.output(lambda o: o.url),
                    config_digest=self._config_digest,
                    drain_timeout_s=fleet.router.drain_timeout_s,
                ),
                pulumi.ResourceOptions(parent=self, depends_on=[benchmark]),
            )
            waits.append(self._gate)
        worker = self._worker(name, url, pod_uid, waits, index)
        return KubeReplica(index, launch, server, benchmark, worker)

    def _worker(
        self,
        name: str,
        url: pulumi.Output[str],
        pod_uid: pulumi.Output[str],
        waits: list[pulumi.Resource],
        index: int,
    ) -> RouterWorker:
        """Replica ``index``'s registration with the router (as its role's worker in PD mode), after
        ``waits``."""
        fleet = self._args.spec.fleet
        assert fleet is not None
        return RouterWorker(
            f"{name}-worker",
            WorkerArgs(
                connection=host_connection(None),
                router_url=self._router.output(lambda o: o.url),
                worker_url=url,
                server_instance=pod_uid,
                config_digest=self._config_digest,
                drain_timeout_s=fleet.router.drain_timeout_s,
                worker_type=self._roles[index] or "regular",
                bootstrap_port=self._bootstrap_ports.get(index),
            ),
            pulumi.ResourceOptions(parent=self, depends_on=waits),
        )
