"""One stack's deployment on a Kubernetes cluster: the cluster's facts checked by preflight before
anything is applied, then the claim on the namespace, the server (a Deployment, or a LeaderWorkerSet
over several nodes), the wait for its pod, the benchmark Job and its result; the same outputs as a
stack on an SSH host (`results.outputs.DeploymentOutputs`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from sglang_stacks.components.benchmark import measured_outputs
from sglang_stacks.components.deployment import DEFAULT_PORT, DeploymentExports
from sglang_stacks.config import preflight
from sglang_stacks.config.findings import Finding
from sglang_stacks.config.memory import plan_memory
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.errors import SpecError, StacksError
from sglang_stacks.hostops import serving
from sglang_stacks.hostops.facts import FoundFacts
from sglang_stacks.kube import facts, jobs, workloads
from sglang_stacks.kube.claim import serving_now
from sglang_stacks.kube.client import ClusterAccess
from sglang_stacks.kube.footing import lay_footing
from sglang_stacks.kube.launch import ServerLaunch, server_launch
from sglang_stacks.kube.server import KubeServer, KubeServerArgs
from sglang_stacks.resources.resource import Args, register
from sglang_stacks.resources.wiring import flags_digest, launch_flags
from sglang_stacks.results.outputs import DeploymentOutputs

__all__ = ["Checked", "KubeDeployment", "KubeDeploymentArgs", "cluster_preflight", "object_name"]


def object_name(stack: str) -> str:
    """A stack's default server object name: ``sglang-<stack>`` as a DNS label."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", stack.lower()).strip("-")
    return f"sglang-{cleaned}"[:40].rstrip("-")


@dataclass(frozen=True)
class Checked:
    """What preflight found on a cluster: the GPUs a server pod gets, the spec judged with them (its
    host's facts the cluster's), and the findings (no errors: they stop the program)."""

    found: FoundFacts
    judged: StackSpec
    findings: list[Finding]


def cluster_preflight(spec: StackSpec, access: ClusterAccess, parent: pulumi.Resource) -> Checked:
    """Reads the cluster's nodes and runs preflight on the GPUs a server pod gets (and, for a fleet,
    checks that the nodes have room for every replica's pod) before anything is declared; warnings
    are logged on ``parent``."""
    nodes = facts.read_nodes(access)
    found = facts.node_facts(spec, nodes)
    if spec.fleet is not None:
        facts.check_replicas_fit(spec, nodes, spec.fleet.replica_count)
    judged = facts.cluster_spec(spec.model_copy(update={"fleet": None}), found)
    findings = [*preflight.run_preflight(judged, spec.environment.sglang_release), *access.findings()]
    preflight.raise_on_errors(findings)
    disaggregation = spec.fleet.disaggregation if spec.fleet is not None else None
    for flags in (disaggregation.role_flags(spec.server) if disaggregation else {}).values():
        # Each role's workers launch with their own flags (a prefill worker without CUDA graphs).
        role = judged.model_copy(update={"server": flags})
        preflight.raise_on_errors(preflight.run_preflight(role, spec.environment.sglang_release))
    for finding in findings:
        if finding.severity == "warning":
            pulumi.log.warn(finding.sentence(), parent)
    return Checked(found, judged, findings)


@dataclass(frozen=True)
class KubeDeploymentArgs:
    """What a deployment on a cluster is made of: the stack's name and its spec (kind: kubernetes)."""

    stack: str
    spec: StackSpec
    hub_token: pulumi.Output[str] | None = None
    """A Hugging Face token for gated models, a Pulumi secret: a Kubernetes Secret the server pods
    read as HF_TOKEN."""


class KubeDeployment(pulumi.ComponentResource):
    """The whole configuration of one stack on a cluster, benchmarked.

    Children: the pulumi-kubernetes provider of the cluster, the claim on the namespace, the server
    object (after the claim), its launch's wait, the load generator's ConfigMap, the benchmark Job
    (after the server is ready) and its result.
    """

    outputs: Args[DeploymentOutputs]
    """The deployment's outputs, the fields of `DeploymentOutputs`."""

    def __init__(
        self, name: str, args: KubeDeploymentArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("sglang-stacks:index:KubeDeployment", name, None, opts)
        spec, stack = args.spec, args.stack
        cluster = spec.host.cluster
        if cluster is None:
            raise SpecError(
                "A KubeDeployment needs a stack whose host has kind: kubernetes and a cluster section."
            )
        release = spec.environment.sglang_release
        access = ClusterAccess.of(cluster)
        checked = cluster_preflight(spec, access, self)
        flags = launch_flags(spec)
        base = cluster.name or object_name(stack)
        token = f"{base}-hub-token" if args.hub_token is not None else None
        launch = server_launch(
            spec, flags, stack=stack, name=base, port=spec.server.port or DEFAULT_PORT, hub_token_secret=token
        )
        if pulumi.runtime.is_dry_run():
            self._announce(access, stack, launch, release)
        footing = lay_footing(
            self, name, access=access, stack=stack, spec=spec, secret_name=token, hub_token=args.hub_token
        )
        child, claimed, before = footing.child, footing.claimed, footing.before
        server_object = self._server_object(name, launch, claimed, child, before)
        server = KubeServer(
            f"{name}-server",
            KubeServerArgs(
                access=access,
                stack=stack,
                workload=f"{launch.kind}/{launch.name}",
                instance=launch.instance,
                flags=flags,
                release=release,
                launch_command=launch.command,
                port=launch.port,
                leader_selector=launch.leader_selector,
                schedule_timeout_s=cluster.schedule_timeout_s,
                ready_timeout_s=spec.launch.ready_timeout_s,
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[server_object]),
        )
        benchmark = jobs.measure(
            f"{name}-benchmark",
            stack=stack,
            spec=spec,
            access=access,
            files=jobs.benchmark_files(name, stack, spec, child),
            measured=jobs.Measured(
                url=server.output(lambda o: o.url),
                instance=server.output(lambda o: o.pod_uid),
                launch_command=launch.command,
                flags_digest=flags_digest(flags),
                gpus=launch.gpus * launch.size,
            ),
            parent=self,
            child=child,
            after=[server],
        )
        self.outputs = DeploymentExports(
            **measured_outputs(benchmark, spec.benchmark),
            launch_command=launch.command,
            launch_flags=flags,
            sglang_version=release,
            host=checked.found,
            server_log=server.output(lambda o: o.pod).apply(
                lambda pod: f"kubectl logs -n {access.namespace} {pod}"
            ),
            preflight=[f for f in checked.findings if f.severity != "info"],  # notes: `sglang-stacks render`
            memory_plan=plan_memory(checked.judged, release),
        )
        register(self, self.outputs)

    def _server_object(
        self,
        name: str,
        launch: ServerLaunch,
        claimed: pulumi.Output[str],
        child: pulumi.ResourceOptions,
        before: list[pulumi.Resource],
    ) -> pulumi.Resource:
        """The Deployment or LeaderWorkerSet, applied once the claim holds the namespace (and the hub
        token's Secret exists: ``before``); the claim's id in an annotation makes a claim taken anew
        reapply it (and so scale it back up)."""
        annotations = claimed.apply(lambda claim_id: workloads.server_annotations(launch.note, claim_id))
        options = pulumi.ResourceOptions.merge(
            child, pulumi.ResourceOptions(depends_on=before, delete_before_replace=True)
        )
        server_object: pulumi.Resource
        if launch.worker is None:
            server_object = k8s.apps.v1.Deployment(
                f"{name}-deployment",
                workloads.server_deployment(launch.name, launch.leader, launch.labels, annotations),
                opts=options,
            )
            return server_object
        server_object = k8s.apiextensions.CustomResource(
            f"{name}-leader-worker-set",
            api_version="leaderworkerset.x-k8s.io/v1",
            kind="LeaderWorkerSet",
            metadata=workloads.server_metadata(launch.name, launch.labels, annotations),
            spec=workloads.server_leader_worker_set(launch.leader, launch.worker, launch.size, launch.labels),
            opts=options,
        )
        return server_object

    def _announce(self, access: ClusterAccess, stack: str, launch: ServerLaunch, release: str) -> None:
        """Says in the preview how this stack differs from what the namespace serves now."""
        try:
            current = serving_now(access)
        except StacksError:
            return  # an unreachable cluster already failed preflight's read, with its own message
        label = f"the namespace {access.namespace} of {access.label}"
        pulumi.log.info(serving.describe(current, stack, launch.flags, release, label), self)
