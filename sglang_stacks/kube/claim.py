"""One stack at a time serves from a namespace's GPUs, as one stack at a time holds an SSH host's.

`KubeClaim` comes before a stack's server object: it scales every other stack's server in the
namespace to no pod (their objects and Pulumi state stay; their own next ``up`` takes the GPUs back)
and waits until their pods are gone, so the GPUs are free when this stack's pod is scheduled. With
``launch.takeover: false`` it refuses instead, naming the stack that serves. A refresh that finds
another stack serving finds the claim gone, so the next ``up`` takes the namespace back: that is how
``pulumi up -s baseline`` rolls back on a cluster. `serving_now` tells a preview what the namespace
serves, to show the flags a deployment would change.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Annotated, Any

import pulumi
from pydantic import ValidationError

from sglang_stacks.errors import ClaimError, HostError
from sglang_stacks.hostops.serving import ServingNote
from sglang_stacks.kube.client import ClusterAccess, api_error_text
from sglang_stacks.kube.workloads import MANAGED_BY, SERVING_ANNOTATION, STACK_LABEL
from sglang_stacks.resources.provider import LABEL, Props, TypedProvider
from sglang_stacks.resources.resource import Args, TypedResource, args_for

__all__ = ["KubeClaim", "KubeClaimArgs", "ServerObject", "server_objects", "serving_now"]

LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
"""LeaderWorkerSet's API group, version and plural."""
_SELECTOR = ",".join(
    f"{key}={value}" for key, value in {**MANAGED_BY, "app.kubernetes.io/name": "sglang"}.items()
)


@dataclass(frozen=True)
class ServerObject:
    """A server object of the project in a namespace: whose, how many pods it asks for, what it serves."""

    kind: str
    name: str
    stack: str
    replicas: int
    note: ServingNote | None


def _note(annotations: dict[str, str] | None) -> ServingNote | None:
    text = (annotations or {}).get(SERVING_ANNOTATION)
    try:
        return ServingNote.model_validate_json(text) if text else None
    except ValidationError:
        return None  # written by another version: what it serves is not known


def server_objects(access: ClusterAccess) -> list[ServerObject]:
    """The project's Deployments and LeaderWorkerSets in the namespace."""
    found: list[ServerObject] = []
    try:
        for item in (
            access.apps().list_namespaced_deployment(access.namespace, label_selector=_SELECTOR).items
        ):
            meta = item.metadata
            stack = (meta.labels or {}).get(STACK_LABEL, "")
            found.append(
                ServerObject("Deployment", meta.name, stack, item.spec.replicas or 0, _note(meta.annotations))
            )
        sets = _leader_worker_sets(access)
    except HostError:
        raise
    except Exception as error:
        raise HostError(
            f"{access.label} did not list the servers of namespace {access.namespace} "
            f"({api_error_text(error)}). Check that the cluster runs and the kubeconfig's user may list them."
        ) from None
    for item in sets:
        meta = item["metadata"]
        stack = (meta.get("labels") or {}).get(STACK_LABEL, "")
        replicas = int(item.get("spec", {}).get("replicas", 1))
        found.append(
            ServerObject("LeaderWorkerSet", meta["name"], stack, replicas, _note(meta.get("annotations")))
        )
    return found


def _leader_worker_sets(access: ClusterAccess) -> list[dict[str, Any]]:
    from kubernetes.client.exceptions import ApiException

    try:
        listed = access.custom().list_namespaced_custom_object(
            *LWS[:2], access.namespace, LWS[2], label_selector=_SELECTOR
        )
    except ApiException as error:
        if error.status == 404:
            return []  # LeaderWorkerSet is not installed: no multi-node server can be there
        raise
    return list(listed.get("items", []))


def serving_now(access: ClusterAccess) -> ServingNote | None:
    """What the namespace serves: the note of a server object that asks for pods, or None."""
    return next((obj.note for obj in server_objects(access) if obj.replicas > 0 and obj.note), None)


def _others(access: ClusterAccess, stack: str) -> list[ServerObject]:
    return [obj for obj in server_objects(access) if obj.stack != stack and obj.replicas > 0]


def _scale_to_zero(access: ClusterAccess, obj: ServerObject) -> None:
    body = {"spec": {"replicas": 0}}
    if obj.kind == "Deployment":
        access.apps().patch_namespaced_deployment_scale(obj.name, access.namespace, body)
    else:
        access.custom().patch_namespaced_custom_object_scale(
            *LWS[:2], access.namespace, LWS[2], obj.name, body
        )


def _wait_gone(access: ClusterAccess, stacks: set[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for stack in sorted(stacks):
        servers = f"{_SELECTOR},{STACK_LABEL}={stack}"  # its benchmark's finished pods hold no GPU
        while access.core().list_namespaced_pod(access.namespace, label_selector=servers).items:
            if time.monotonic() > deadline:
                raise ClaimError(
                    f"The pods of stack {stack!r} in namespace {access.namespace} were not gone "
                    f"{timeout_s:g} s after it was scaled to none; they still hold their GPUs. Check them "
                    f"with `kubectl get pods -n {access.namespace}` and run `pulumi up` again."
                )
            time.sleep(1.0)


class KubeClaimInputs(Props):
    """Whose claim, and whether it may take the namespace from another stack."""

    access: Annotated[ClusterAccess, LABEL]
    stack: Annotated[str, LABEL]
    takeover: Annotated[bool, LABEL] = True
    stop_timeout_s: Annotated[float, LABEL] = 120.0


class KubeClaimOutputs(Props):
    """What the claim did."""

    claim_id: str
    """New for each claim: the server object records it, so a claim taken anew reapplies it."""
    taken_from: list[str]
    """The stacks whose servers it scaled to none."""


class KubeClaimProvider(TypedProvider[KubeClaimInputs, KubeClaimOutputs]):
    """Takes the namespace's GPUs for one stack; found gone when another stack serves there."""

    inputs = KubeClaimInputs
    outputs = KubeClaimOutputs

    def resource_id(self, inputs: KubeClaimInputs, outputs: KubeClaimOutputs) -> str:
        return outputs.claim_id

    def create_typed(self, inputs: KubeClaimInputs) -> KubeClaimOutputs:
        access = inputs.access
        others = _others(access, inputs.stack)
        if others and not inputs.takeover:
            holders = ", ".join(sorted({obj.stack for obj in others}))
            raise ClaimError(
                f"Namespace {access.namespace} of {access.label} serves stack {holders}, and this stack sets "
                "launch.takeover: false. Destroy that stack, or set launch.takeover: true to take its GPUs."
            )
        for obj in others:
            _scale_to_zero(access, obj)
        _wait_gone(access, {obj.stack for obj in others}, inputs.stop_timeout_s + 30)
        return KubeClaimOutputs(
            claim_id=uuid.uuid4().hex[:12], taken_from=sorted({obj.stack for obj in others})
        )

    def read_typed(self, inputs: KubeClaimInputs, outputs: KubeClaimOutputs) -> KubeClaimOutputs | None:
        return None if _others(inputs.access, inputs.stack) else outputs


KubeClaimArgs = args_for(KubeClaimInputs)
"""`KubeClaim`'s arguments: the fields of `KubeClaimInputs`, each a value or an Output of one."""


class KubeClaim(TypedResource[KubeClaimInputs, KubeClaimOutputs], module="sglang", name="KubeClaim"):
    """A stack's hold on a namespace's GPUs; its outputs are `KubeClaimOutputs`."""

    def __init__(
        self, name: str, args: Args[KubeClaimInputs], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(KubeClaimProvider(), name, args, opts)
