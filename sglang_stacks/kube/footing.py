"""What a stack's objects on a cluster stand on, for one server and a fleet alike: the cluster's
provider, the claim of the stack's objects there, and the hub token's Secret."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from sglang_stacks.config.spec import StackSpec
from sglang_stacks.kube import workloads
from sglang_stacks.kube.claim import KubeClaim, KubeClaimArgs
from sglang_stacks.kube.client import ClusterAccess


@dataclass(frozen=True)
class Footing:
    """The provider's options for the stack's objects, the claim's id, and what must exist first."""

    child: pulumi.ResourceOptions
    """Options of every object on the cluster: parented to the component, through its provider."""
    claimed: pulumi.Output[str]
    """The claim's id, annotated on the server objects so that a claim taken anew replaces them."""
    before: list[pulumi.Resource]
    """The claim and the hub token's Secret (when there is one): made before any server object."""


def lay_footing(
    parent: pulumi.ComponentResource,
    name: str,
    *,
    access: ClusterAccess,
    stack: str,
    spec: StackSpec,
    secret_name: str | None,
    hub_token: pulumi.Output[str] | None,
) -> Footing:
    """The cluster's provider, the stack's claim and, when a token is given, its Secret ``secret_name``."""
    provider = k8s.Provider(
        f"{name}-cluster",
        kubeconfig=access.kubeconfig,
        context=access.context,
        namespace=access.namespace,
        opts=pulumi.ResourceOptions(parent=parent),
    )
    child = pulumi.ResourceOptions(parent=parent, provider=provider)
    claim = KubeClaim(
        f"{name}-claim",
        KubeClaimArgs(
            access=access,
            stack=stack,
            takeover=spec.launch.takeover,
            stop_timeout_s=spec.launch.stop_timeout_s,
        ),
        pulumi.ResourceOptions(parent=parent),
    )
    before: list[pulumi.Resource] = [claim]
    if secret_name is not None and hub_token is not None:
        labels = {**workloads.MANAGED_BY, workloads.STACK_LABEL: stack}
        secret = workloads.hub_token_secret(secret_name, hub_token, labels)
        before.append(k8s.core.v1.Secret(f"{name}-hub-token", secret, opts=child))
    return Footing(child, claim.output(lambda o: o.claim_id), before)
