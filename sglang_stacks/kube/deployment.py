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

from sglang_stacks.components._resource import Args, register
from sglang_stacks.components._wiring import flags_digest, launch_flags
from sglang_stacks.components.deployment import DEFAULT_PORT, DeploymentExports
from sglang_stacks.config import preflight
from sglang_stacks.config.memory import plan_memory
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.errors import SpecError, StacksError
from sglang_stacks.hostops import serving
from sglang_stacks.kube import facts, workloads
from sglang_stacks.kube.benchmark import KubeBenchmark, KubeBenchmarkArgs
from sglang_stacks.kube.claim import KubeClaim, KubeClaimArgs, serving_now
from sglang_stacks.kube.client import ClusterAccess
from sglang_stacks.kube.launch import ServerLaunch, server_launch
from sglang_stacks.kube.server import KubeServer, KubeServerArgs
from sglang_stacks.results.outputs import DeploymentOutputs

__all__ = ["KubeDeployment", "KubeDeploymentArgs", "object_name"]


def object_name(stack: str) -> str:
    """A stack's default server object name: ``sglang-<stack>`` as a DNS label."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", stack.lower()).strip("-")
    return f"sglang-{cleaned}"[:40].rstrip("-")


@dataclass(frozen=True)
class KubeDeploymentArgs:
    """What a deployment on a cluster is made of: the stack's name and its spec (kind: kubernetes)."""

    stack: str
    spec: StackSpec


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
        found = facts.node_facts(spec, facts.read_nodes(access))
        judged = facts.cluster_spec(spec, found)
        findings = preflight.run_preflight(judged, release)
        preflight.raise_on_errors(findings)
        for finding in findings:
            if finding.severity == "warning":
                pulumi.log.warn(finding.sentence(), self)
        flags = launch_flags(spec)
        launch = server_launch(
            spec,
            flags,
            stack=stack,
            name=cluster.name or object_name(stack),
            port=spec.server.port or DEFAULT_PORT,
        )
        if pulumi.runtime.is_dry_run():
            self._announce(access, stack, launch, release)
        provider = k8s.Provider(
            f"{name}-cluster",
            kubeconfig=access.kubeconfig,
            context=access.context,
            namespace=access.namespace,
            opts=pulumi.ResourceOptions(parent=self),
        )
        child = pulumi.ResourceOptions(parent=self, provider=provider)
        claim = KubeClaim(
            f"{name}-claim",
            KubeClaimArgs(
                access=access,
                stack=stack,
                takeover=spec.launch.takeover,
                stop_timeout_s=spec.launch.stop_timeout_s,
            ),
            pulumi.ResourceOptions(parent=self),
        )
        claimed = claim.output(lambda o: o.claim_id)
        server_object = self._server_object(name, launch, claimed, child, claim)
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
        benchmark = self._benchmark(name, stack, spec, access, launch, server, child)
        levels = benchmark.output(lambda o: o.levels)
        first = levels.apply(lambda measured: measured[0])
        self.outputs = DeploymentExports(
            tok_s=first.apply(lambda result: result.tok_s_mean),
            benchmark=first,
            benchmark_levels=levels,
            goodput=first.apply(lambda result: result.goodput),
            launch_command=launch.command,
            launch_flags=flags,
            sglang_version=release,
            host=found,
            server_log=server.output(lambda o: o.pod).apply(
                lambda pod: f"kubectl logs -n {access.namespace} {pod}"
            ),
            preflight=findings,
            memory_plan=plan_memory(judged, release),
        )
        register(self, self.outputs)

    def _server_object(
        self,
        name: str,
        launch: ServerLaunch,
        claimed: pulumi.Output[str],
        child: pulumi.ResourceOptions,
        claim: KubeClaim,
    ) -> pulumi.Resource:
        """The Deployment or LeaderWorkerSet, applied once the claim holds the namespace; the claim's
        id in an annotation makes a claim taken anew reapply it (and so scale it back up)."""
        annotations = claimed.apply(lambda claim_id: workloads.server_annotations(launch.note, claim_id))
        options = pulumi.ResourceOptions.merge(
            child, pulumi.ResourceOptions(depends_on=[claim], delete_before_replace=True)
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

    def _benchmark(
        self,
        name: str,
        stack: str,
        spec: StackSpec,
        access: ClusterAccess,
        launch: ServerLaunch,
        server: KubeServer,
        child: pulumi.ResourceOptions,
    ) -> KubeBenchmark:
        """The load generator's ConfigMap, the Job that runs it against the ready server, its result."""
        from sglang_stacks.hostops import loadgen
        from sglang_stacks.hostops.loadgen.contract import Workload

        if spec.benchmark.dataset_path:
            raise SpecError(
                "sglang-stacks:benchmark.dataset_path is not supported on a kubernetes host yet; use "
                "dataset: fixed or random."
            )
        cluster = spec.host.cluster
        assert cluster is not None
        labels = {
            **workloads.MANAGED_BY,
            "app.kubernetes.io/name": "sglang-benchmark",
            workloads.STACK_LABEL: stack,
        }
        config_map = k8s.core.v1.ConfigMap(
            f"{name}-loadgen", workloads.loadgen_config_map(loadgen.source_files(), labels), opts=child
        )
        settings = spec.benchmark.settings()

        def command(url: str) -> list[str]:
            return [cluster.python, "-m", loadgen.PACKAGE_NAME, *Workload.from_settings(url, settings).argv()]

        job = k8s.batch.v1.Job(
            f"{name}-benchmark-job",
            workloads.benchmark_job(
                image=cluster.image,
                pull_policy=cluster.image_pull_policy,
                command=server.output(lambda o: o.url).apply(command),
                config_map=config_map.metadata.name,
                node_selector=cluster.selector(),
                labels=labels,
                pod_labels=server.output(lambda o: o.pod_uid).apply(
                    lambda pod_uid: {**labels, workloads.SERVER_POD_LABEL: pod_uid}
                ),
                timeout_s=spec.benchmark.timeout_s,
            ),
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[server])),
        )
        return KubeBenchmark(
            f"{name}-benchmark",
            KubeBenchmarkArgs(
                access=access,
                stack=stack,
                job=job.metadata.name,
                server_instance=server.output(lambda o: o.pod_uid),
                workload=spec.benchmark,
                launch_command=launch.command,
                sglang_version=spec.environment.sglang_release,
                flags_digest=flags_digest(launch_flags(spec)),
                gate=spec.gate,
                gpu_hour_price=spec.host.gpu_hour_price,
                gpu_count=launch.gpus * launch.size,
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[job]),
        )

    def _announce(self, access: ClusterAccess, stack: str, launch: ServerLaunch, release: str) -> None:
        """Says in the preview how this stack differs from what the namespace serves now."""
        try:
            current = serving_now(access)
        except StacksError:
            return  # an unreachable cluster already failed preflight's read, with its own message
        label = f"the namespace {access.namespace} of {access.label}"
        pulumi.log.info(serving.describe(current, stack, launch.flags, release, label), self)
