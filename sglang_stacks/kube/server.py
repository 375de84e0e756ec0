"""KubeServer: one launch of a server on a cluster, ready, as a Pulumi resource.

The server's Deployment (or LeaderWorkerSet) is pulumi-kubernetes's; this resource comes after it and
waits for the pod of this launch (its pod template's digest, the ``instance`` label) to pass its
readiness probe, naming a Pending pod's reason, a crash or a timeout as typed errors. It records the
launch flags as a map (canonical flag name -> value), so ``pulumi preview --diff`` shows a change flag
by flag, as the SSH server's does. A refresh finds it gone when no pod of the launch is ready; an
update after a failed one starts the launch's failed pods anew before it waits.
"""

from __future__ import annotations

from typing import Annotated

import pulumi

from sglang_stacks.config.flags import LaunchFlags
from sglang_stacks.kube import pods
from sglang_stacks.kube.client import ClusterAccess
from sglang_stacks.resources.provider import LABEL, REPLACES, Props, TypedProvider
from sglang_stacks.resources.resource import Args, TypedResource, args_for

__all__ = ["KubeServer", "KubeServerArgs", "KubeServerInputs", "KubeServerOutputs"]


class KubeServerInputs(Props):
    """The launch waited for; a change of a ``REPLACES`` field is a new launch (a new pod)."""

    access: Annotated[ClusterAccess, LABEL]
    """The cluster and namespace (the kubeconfig's path may move without a relaunch)."""
    stack: Annotated[str, LABEL]
    """The stack whose server it is."""
    workload: Annotated[str, REPLACES]
    """``Deployment/<name>`` or ``LeaderWorkerSet/<name>``: the object that runs the pods."""
    instance: Annotated[str, REPLACES]
    """The digest of the pod template: its pods carry it as the ``sglang-stacks.io/instance`` label."""
    flags: Annotated[LaunchFlags, REPLACES]
    """The launch flags, rendered for ``release`` into the pod's argv."""
    release: Annotated[str, REPLACES]
    """The SGLang release the flags are rendered for."""
    launch_command: Annotated[str, LABEL]
    """The pod's command line, as a shell would run it."""
    port: Annotated[int, REPLACES]
    """The server's HTTP port on its node (the pod is on the host's network)."""
    leader_selector: Annotated[str, LABEL] = ""
    """More labels that pick the pod serving HTTP (a multi-node server's leader)."""
    schedule_timeout_s: float = 120.0
    ready_timeout_s: float = 1800.0


class KubeServerOutputs(Props):
    """The ready pod."""

    pod: str
    """The pod that serves HTTP (its log is SGLang's: ``kubectl logs -n <namespace> <pod>``)."""
    pod_uid: str
    """The pod's uid, new for every pod that serves (a relaunch, a pod the cluster replaced): what the
    benchmark keys its results on, so a new pod is measured anew."""
    node: str
    """The node it runs on."""
    url: str
    """The server's base URL: the pod's address (the node's) and port."""


def selector(inputs: KubeServerInputs) -> str:
    """The label selector of this launch's HTTP-serving pod."""
    own = f"sglang-stacks.io/instance={inputs.instance}"
    return f"{own},{inputs.leader_selector}" if inputs.leader_selector else own


class KubeServerProvider(TypedProvider[KubeServerInputs, KubeServerOutputs]):
    """Waits for a launch's pod to be ready; a refresh finds the launch gone when none is."""

    inputs = KubeServerInputs
    outputs = KubeServerOutputs

    def resource_id(self, inputs: KubeServerInputs, outputs: KubeServerOutputs) -> str:
        return inputs.instance

    def create_typed(self, inputs: KubeServerInputs) -> KubeServerOutputs:
        access = inputs.access
        pods.restart_failed(access, f"sglang-stacks.io/instance={inputs.instance}")
        ready = pods.wait_ready(
            access,
            selector(inputs),
            what=f"SGLang ({inputs.workload} of stack {inputs.stack}) on {access.label}",
            schedule_timeout_s=inputs.schedule_timeout_s,
            ready_timeout_s=inputs.ready_timeout_s,
        )
        return KubeServerOutputs(
            pod=ready.name,
            pod_uid=ready.uid,
            node=ready.node,
            url=f"http://{ready.ip}:{inputs.port}",
        )

    def read_typed(self, inputs: KubeServerInputs, outputs: KubeServerOutputs) -> KubeServerOutputs | None:
        found = pods.find_ready(inputs.access, selector(inputs))
        if found is None:
            return None  # gone or not ready: the next up waits for the launch again, and measures it anew
        return outputs.model_copy(update={"pod": found.name, "pod_uid": found.uid, "node": found.node})


KubeServerArgs = args_for(KubeServerInputs)
"""`KubeServer`'s arguments: the fields of `KubeServerInputs`, each a value or an Output of one."""


class KubeServer(TypedResource[KubeServerInputs, KubeServerOutputs], module="sglang", name="KubeServer"):
    """A server launch on a cluster, ready when created; its outputs are `KubeServerOutputs`."""

    def __init__(
        self, name: str, args: Args[KubeServerInputs], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(KubeServerProvider(), name, args, opts)
