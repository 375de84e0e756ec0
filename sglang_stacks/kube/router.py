"""SGLang's router in front of a fleet on a cluster: a Deployment of one pod on the host's network
running ``python3 -m sglang_router.launch_router`` (the ``sglang-router`` package the image holds),
a Service that clients in the cluster reach it through, and `KubeRouter`, which waits for the router's
pod to answer and gives the address the project's worker API calls and benchmarks use.

The router starts with no workers: each replica is added through its worker API once ready
(`sglang_stacks.components.router.RouterWorker`, as for a fleet of SSH hosts), so the canary gate can
keep a replica out of it.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

import pulumi
import pulumi_kubernetes as k8s

from sglang_stacks.config.fleet import RouterSpec
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.kube import pods
from sglang_stacks.kube.client import ClusterAccess
from sglang_stacks.kube.workloads import INSTANCE_LABEL, MANAGED_BY, SKIP_AWAIT, STACK_LABEL
from sglang_stacks.resources.provider import LABEL, REPLACES, Props, TypedProvider
from sglang_stacks.resources.resource import Args, TypedResource, args_for
from sglang_stacks.resources.wiring import digest

__all__ = ["KubeRouter", "KubeRouterArgs", "RouterPod", "fleet_router", "router_deployment", "router_service"]

_CHECK = (
    'found=$("$1" -c "import importlib.metadata as m; print(m.version(\'sglang-router\'))" 2>/dev/null) '
    '|| found=none; [ "$found" = "$2" ] || { echo "the image has sglang-router $found, but the fleet '
    'runs $2: use an image with sglang-router==$2, or set fleet.router.release" >&2; exit 1; }; '
    'shift 2; exec "$@"'
)


@dataclass(frozen=True)
class RouterPod:
    """What the router's pod runs: the image, its Python, the router's settings and where it listens."""

    image: str
    pull_policy: str
    python: str
    router: RouterSpec
    bind: str
    """The address it listens on (``--host``)."""
    node_selector: Mapping[str, str]
    pd_disaggregation: bool = False
    """PD mode (``--pd-disaggregation``): it pairs a prefill worker with a decode worker per request."""

    def argv(self) -> list[str]:
        """The router's command line."""
        router = self.router
        return [
            self.python,
            "-m",
            "sglang_router.launch_router",
            *("--host", self.bind, "--port", str(router.port), "--policy", router.policy),
            *("--health-check-interval-secs", str(router.health_check_interval_s), "--log-level", "warn"),
            *("--prometheus-host", self.bind, "--prometheus-port", str(router.metrics_port)),
            *(["--pd-disaggregation"] if self.pd_disaggregation else []),
        ]

    @property
    def command(self) -> str:
        """The router's command line as a shell would run it."""
        return shlex.join(self.argv())

    def template(self, labels: Mapping[str, str]) -> k8s.core.v1.PodTemplateSpecArgs:
        """The pod: on the host's network, the release checked before the router starts, ready once
        the router answers ``/liveness`` (it has no worker yet, so not ``/readiness``)."""
        port = self.router.port
        return k8s.core.v1.PodTemplateSpecArgs(
            metadata=k8s.meta.v1.ObjectMetaArgs(labels=dict(labels)),
            spec=k8s.core.v1.PodSpecArgs(
                host_network=True,
                dns_policy="ClusterFirstWithHostNet",
                node_selector=dict(self.node_selector) or None,
                termination_grace_period_seconds=10,
                containers=[
                    k8s.core.v1.ContainerArgs(
                        name="router",
                        image=self.image,
                        image_pull_policy=self.pull_policy,
                        command=["sh", "-c", _CHECK, "router", self.python, self.router.release],
                        args=self.argv(),
                        ports=[
                            k8s.core.v1.ContainerPortArgs(container_port=port, name="http"),
                            k8s.core.v1.ContainerPortArgs(
                                container_port=self.router.metrics_port, name="metrics"
                            ),
                        ],
                        readiness_probe=k8s.core.v1.ProbeArgs(
                            http_get=k8s.core.v1.HTTPGetActionArgs(path="/liveness", port=port),
                            period_seconds=1,
                            failure_threshold=3,
                        ),
                    )
                ],
            ),
        )


def router_labels(name: str) -> dict[str, str]:
    """The labels that select a fleet's router pod (its Service's selector)."""
    return {**MANAGED_BY, "app.kubernetes.io/name": "sglang-router", "app.kubernetes.io/instance": name}


def router_deployment(name: str, stack: str, pod: RouterPod, instance: str) -> k8s.apps.v1.DeploymentInitArgs:
    """The router: one pod, recreated on a change (two would share the port)."""
    selector = router_labels(name)
    labels = {**selector, STACK_LABEL: stack, INSTANCE_LABEL: instance}
    return k8s.apps.v1.DeploymentInitArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=name, labels={**selector, STACK_LABEL: stack}, annotations=SKIP_AWAIT
        ),
        spec=k8s.apps.v1.DeploymentSpecArgs(
            replicas=1,
            selector=k8s.meta.v1.LabelSelectorArgs(match_labels=selector),
            strategy=k8s.apps.v1.DeploymentStrategyArgs(type="Recreate"),
            template=pod.template(labels),
        ),
    )


def router_service(name: str, stack: str, port: int) -> k8s.core.v1.ServiceInitArgs:
    """The router's Service: where clients inside the cluster send requests
    (``http://<name>.<namespace>.svc:<port>``)."""
    selector = router_labels(name)
    return k8s.core.v1.ServiceInitArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=name, labels={**selector, STACK_LABEL: stack}, annotations=SKIP_AWAIT
        ),
        spec=k8s.core.v1.ServiceSpecArgs(
            selector=selector,
            ports=[k8s.core.v1.ServicePortArgs(name="http", port=port, target_port=port)],
        ),
    )


class KubeRouterInputs(Props):
    """The router's pod waited for; a change of a ``REPLACES`` field is a new router (no workers)."""

    access: Annotated[ClusterAccess, LABEL]
    stack: Annotated[str, LABEL]
    workload: Annotated[str, REPLACES]
    """``Deployment/<name>``: the object that runs the router's pod."""
    instance: Annotated[str, REPLACES]
    """The digest of the router's pod template (its pod's ``sglang-stacks.io/instance`` label)."""
    port: Annotated[int, REPLACES]
    schedule_timeout_s: float = 120.0
    ready_timeout_s: float = 120.0


class KubeRouterOutputs(Props):
    """The router's pod, answering."""

    pod: str
    """The router's pod (its log: ``kubectl logs -n <namespace> <pod>``)."""
    pod_uid: str
    url: str
    """The router's base URL at its pod's address (its node's, on the host's network)."""


class KubeRouterProvider(TypedProvider[KubeRouterInputs, KubeRouterOutputs]):
    """Waits for the router's pod; a refresh finds the router gone when its pod is not ready."""

    inputs = KubeRouterInputs
    outputs = KubeRouterOutputs

    def resource_id(self, inputs: KubeRouterInputs, outputs: KubeRouterOutputs) -> str:
        return outputs.pod_uid

    def create_typed(self, inputs: KubeRouterInputs) -> KubeRouterOutputs:
        access = inputs.access
        ready = pods.wait_ready(
            access,
            f"{INSTANCE_LABEL}={inputs.instance}",
            what=f"SGLang's router ({inputs.workload} of stack {inputs.stack}) on {access.label}",
            schedule_timeout_s=inputs.schedule_timeout_s,
            ready_timeout_s=inputs.ready_timeout_s,
        )
        return KubeRouterOutputs(pod=ready.name, pod_uid=ready.uid, url=f"http://{ready.ip}:{inputs.port}")

    def read_typed(self, inputs: KubeRouterInputs, outputs: KubeRouterOutputs) -> KubeRouterOutputs | None:
        found = pods.find_ready(inputs.access, f"{INSTANCE_LABEL}={inputs.instance}")
        if found is None or found.uid != outputs.pod_uid:
            return None  # a router pod that restarted has forgotten its workers: they are added anew
        return outputs


KubeRouterArgs = args_for(KubeRouterInputs)
"""`KubeRouter`'s arguments: the fields of `KubeRouterInputs`, each a value or an Output of one."""


class KubeRouter(TypedResource[KubeRouterInputs, KubeRouterOutputs], module="sglang", name="KubeRouter"):
    """A fleet's router on a cluster, answering when created; its outputs are `KubeRouterOutputs`."""

    def __init__(
        self, name: str, args: Args[KubeRouterInputs], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(KubeRouterProvider(), name, args, opts)


def fleet_router(
    name: str,
    stack: str,
    object_name: str,
    spec: StackSpec,
    access: ClusterAccess,
    parent: pulumi.Resource,
    child: pulumi.ResourceOptions,
) -> KubeRouter:
    """A fleet's router: its Deployment and Service named ``object_name`` (under ``child``'s
    provider), and the wait for its pod (``<name>-router``)."""
    fleet, cluster = spec.fleet, spec.host.cluster
    assert fleet is not None and cluster is not None
    # A router pod listens on its node's every address unless told otherwise: the Service reaches it
    # at the node's (the local test cluster's stack names 127.0.0.1).
    bind = fleet.router.host if "host" in fleet.router.model_fields_set else "0.0.0.0"
    pod = RouterPod(
        image=cluster.image,
        pull_policy=cluster.image_pull_policy,
        python=cluster.python,
        router=fleet.router,
        bind=bind,
        node_selector=cluster.node_selector,
        pd_disaggregation=fleet.disaggregation is not None,
    )
    instance = digest({"image": cluster.image, "command": pod.argv(), "release": fleet.router.release})
    deployment = k8s.apps.v1.Deployment(
        f"{name}-router-deployment", router_deployment(object_name, stack, pod, instance), opts=child
    )
    k8s.core.v1.Service(
        f"{name}-router-service", router_service(object_name, stack, fleet.router.port), opts=child
    )
    return KubeRouter(
        f"{name}-router",
        KubeRouterArgs(
            access=access,
            stack=stack,
            workload=deployment.metadata.apply(lambda meta: f"Deployment/{meta.name}"),
            instance=instance,
            port=fleet.router.port,
            schedule_timeout_s=cluster.schedule_timeout_s,
        ),
        pulumi.ResourceOptions(parent=parent),
    )
