"""The server objects of a stack, as pulumi-kubernetes's typed arguments: the server's pod template
(on the host's network, SGLang's argv from the one renderer, ``/health_generate`` as its readiness
probe, ``nvidia.com/gpu`` requested, the draft model as a volume, the hub token from a Secret), the
Deployment of a one-node server and the LeaderWorkerSet of a multi-node one. The benchmark's Job is
`sglang_stacks.kube.jobs`'s.

Every object carries ``pulumi.com/skipAwait``: the project's own providers wait for a server's pod
(`sglang_stacks.kube.server`) and for the benchmark (`sglang_stacks.kube.benchmark`), so that a Pending
pod, a crash or a failed request is named as it is over SSH rather than after pulumi-kubernetes's
generic ten-minute wait.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from sglang_stacks.kube.draft import draft_check, draft_mount, draft_volume
from sglang_stacks.kube.facts import GPU_RESOURCE

__all__ = [
    "DELETED_AT_ONCE",
    "HUB_TOKEN_VARIABLE",
    "MANAGED_BY",
    "ServerPod",
    "hub_token_secret",
    "server_annotations",
    "server_deployment",
    "server_labels",
    "server_leader_worker_set",
    "server_metadata",
]

MANAGED_BY = {"app.kubernetes.io/managed-by": "sglang-stacks"}
"""The label of every object the project applies."""
STACK_LABEL = "sglang-stacks.io/stack"
INSTANCE_LABEL = "sglang-stacks.io/instance"
"""The digest of a server's pod template: the pods of one launch of one configuration."""
SERVER_POD_LABEL = "sglang-stacks.io/server-pod"
"""On a benchmark's pod: the uid of the server pod it measures."""
SERVING_ANNOTATION = "sglang-stacks.io/serving"
"""A server's `ServingNote` (stack, release, typed flags, command): what a preview compares with."""
CLAIM_ANNOTATION = "sglang-stacks.io/claim"
"""The claim a server object was applied under: a claim taken anew reapplies it (`kube.claim`)."""
SKIP_AWAIT = {"pulumi.com/skipAwait": "true"}
DELETED_AT_ONCE = {"pulumi.com/deletionPropagationPolicy": "background"}
"""On an object replaced by a new one of the same name: the old one is gone when its delete returns
(its pods stop after it, in the background). The default, foreground, leaves it in place until its
pods are gone, and pulumi-kubernetes does not wait for that on an object it does not await: the new
object's apply would land on the old one, about to vanish."""
HUB_TOKEN_VARIABLE = "HF_TOKEN"
"""The variable the hub token reaches the server in, as on an SSH host."""


def server_labels(stack: str, name: str) -> dict[str, str]:
    """The labels of a stack's server objects and pods."""
    return {
        **MANAGED_BY,
        "app.kubernetes.io/name": "sglang",
        "app.kubernetes.io/instance": name,
        STACK_LABEL: stack,
    }


@dataclass(frozen=True)
class ServerPod:
    """What a server pod runs and needs: its command, argv and variables, its GPUs and port."""

    image: str
    pull_policy: str
    command: Sequence[str]
    """The image's Python and the launcher module (``python3 -m sglang.launch_server``)."""
    argv: Sequence[str]
    """SGLang's argv, from `config.render.render_argv`."""
    env: Mapping[str, str]
    gpus: int
    port: int
    node_selector: Mapping[str, str]
    stop_timeout_s: float
    draft_path: str | None = None
    """The draft model's folder on the node, mounted at the same path; checked by sha256 first."""
    draft_sha256: str | None = None
    probe: bool = True
    """Whether the pod serves HTTP (a multi-node server's other ranks do not)."""
    secret_env: Mapping[str, str] = field(default_factory=dict)
    """Variables taken from a Secret: variable name -> the Secret's name (its key is the variable's
    name), so that no pod spec holds the value (the hub token)."""

    def variables(self) -> list[k8s.core.v1.EnvVarArgs]:
        """The container's variables: the plain ones, then those from Secrets."""
        plain = [k8s.core.v1.EnvVarArgs(name=key, value=value) for key, value in sorted(self.env.items())]
        hidden = [
            k8s.core.v1.EnvVarArgs(
                name=key,
                value_from=k8s.core.v1.EnvVarSourceArgs(
                    secret_key_ref=k8s.core.v1.SecretKeySelectorArgs(name=secret, key=key)
                ),
            )
            for key, secret in sorted(self.secret_env.items())
        ]
        return plain + hidden

    def container(self) -> k8s.core.v1.ContainerArgs:
        """The server's container."""
        probe = k8s.core.v1.ProbeArgs(
            http_get=k8s.core.v1.HTTPGetActionArgs(path="/health_generate", port=self.port),
            period_seconds=2,
            timeout_seconds=30,
            failure_threshold=3,
        )
        return k8s.core.v1.ContainerArgs(
            name="sglang",
            image=self.image,
            image_pull_policy=self.pull_policy,
            command=list(self.command),
            args=list(self.argv),
            env=self.variables(),
            ports=[k8s.core.v1.ContainerPortArgs(container_port=self.port, name="http")]
            if self.probe
            else None,
            readiness_probe=probe if self.probe else None,
            resources=k8s.core.v1.ResourceRequirementsArgs(limits={GPU_RESOURCE: str(self.gpus)}),
            volume_mounts=[draft_mount(self.draft_path)] if self.draft_path else None,
        )

    def draft_check(self) -> list[k8s.core.v1.ContainerArgs] | None:
        """The init container that checks the draft model's sha256 (`sglang_stacks.kube.draft`)."""
        if not self.draft_path or not self.draft_sha256:
            return None
        return [draft_check(self.image, self.pull_policy, self.draft_path, self.draft_sha256)]

    def template(self, labels: Mapping[str, str]) -> k8s.core.v1.PodTemplateSpecArgs:
        """The pod template: on the host's network, the GPUs requested, the draft model mounted."""
        volumes = [draft_volume(self.draft_path)] if self.draft_path else None
        return k8s.core.v1.PodTemplateSpecArgs(
            metadata=k8s.meta.v1.ObjectMetaArgs(labels=dict(labels)),
            spec=k8s.core.v1.PodSpecArgs(
                host_network=True,
                dns_policy="ClusterFirstWithHostNet",
                node_selector=dict(self.node_selector) or None,
                termination_grace_period_seconds=int(self.stop_timeout_s),
                init_containers=self.draft_check(),
                containers=[self.container()],
                volumes=volumes,
            ),
        )


def server_annotations(note: str, claim_id: str) -> dict[str, str]:
    """A server object's annotations: what it serves (a `ServingNote`'s JSON), the claim it was applied
    under, and how pulumi-kubernetes applies it."""
    # Another stack's claim scales this object to no pod (sglang_stacks.kube.claim); this stack's next
    # update takes the field back, which server-side apply allows only when forced.
    force = {"pulumi.com/patchForce": "true"}
    return {**SKIP_AWAIT, **force, SERVING_ANNOTATION: note, CLAIM_ANNOTATION: claim_id}


def server_metadata(
    name: str, labels: Mapping[str, str], annotations: pulumi.Input[Mapping[str, str]]
) -> k8s.meta.v1.ObjectMetaArgs:
    """A server object's metadata: its name, its labels (the launch's digest left out), ``annotations``
    (`server_annotations`)."""
    labels = {key: value for key, value in labels.items() if key != INSTANCE_LABEL}
    return k8s.meta.v1.ObjectMetaArgs(name=name, labels=labels, annotations=annotations)


def server_deployment(
    name: str,
    pod: ServerPod,
    labels: Mapping[str, str],
    annotations: pulumi.Input[Mapping[str, str]],
    *,
    replicas: int = 1,
) -> k8s.apps.v1.DeploymentInitArgs:
    """A one-node server: one pod, recreated (never two at once: they would share the GPUs and the port)."""
    selector = {key: value for key, value in labels.items() if key != INSTANCE_LABEL}
    return k8s.apps.v1.DeploymentInitArgs(
        metadata=server_metadata(name, labels, annotations),
        spec=k8s.apps.v1.DeploymentSpecArgs(
            replicas=replicas,
            selector=k8s.meta.v1.LabelSelectorArgs(match_labels=selector),
            strategy=k8s.apps.v1.DeploymentStrategyArgs(type="Recreate"),
            template=pod.template(labels),
        ),
    )


def server_leader_worker_set(
    leader: ServerPod,
    worker: ServerPod,
    size: int,
    labels: Mapping[str, str],
    *,
    replicas: int = 1,
) -> dict[str, object]:
    """A multi-node server: one group of ``size`` pods (rank 0 the leader, which serves HTTP), as
    LeaderWorkerSet's ``spec``; the group is recreated whole when any pod of it fails."""
    return {
        "replicas": replicas,
        "startupPolicy": "LeaderCreated",
        "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxUnavailable": 1}},
        "leaderWorkerTemplate": {
            "size": size,
            "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": leader.template(labels),
            "workerTemplate": worker.template(labels),
        },
    }


def hub_token_secret(
    name: str, token: pulumi.Input[str], labels: Mapping[str, str]
) -> k8s.core.v1.SecretInitArgs:
    """The Secret that holds the hub token (``hubToken``, a Pulumi secret, stays one in the state:
    pulumi-kubernetes keeps a Secret's data secret) under the key the server pods read it from."""
    return k8s.core.v1.SecretInitArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(name=name, labels=dict(labels)),
        type="Opaque",
        string_data=pulumi.Output.secret(token).apply(lambda value: {HUB_TOKEN_VARIABLE: value}),
    )
