"""A stack's server launch on a cluster, worked out in the program: the pods' command and SGLang's
argv (from the one renderer, `config.render`), the GPUs each pod requests, the labels, the digest
that names this launch, and the note of what it serves.

A multi-node server is a LeaderWorkerSet group: the same argv on every pod plus SGLang's
``--nnodes N --node-rank R --dist-init-addr <leader>:<port>``, where LeaderWorkerSet tells each pod
its leader's address and its index (``LWS_LEADER_ADDRESS``, ``LWS_WORKER_INDEX``, expanded by the
kubelet in the container's arguments).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from sglang_stacks.components.environment import LAUNCHER_MODULES
from sglang_stacks.config.flags import ServerFlags
from sglang_stacks.config.render import render_argv, render_command
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.errors import SpecError
from sglang_stacks.hostops.serving import ServingNote
from sglang_stacks.kube.facts import gpus_per_pod
from sglang_stacks.kube.workloads import HUB_TOKEN_VARIABLE, INSTANCE_LABEL, ServerPod, server_labels
from sglang_stacks.resources.wiring import digest, emulator_env

__all__ = ["LEADER_SELECTOR", "ServerLaunch", "server_launch"]

LEADER_SELECTOR = "leaderworkerset.sigs.k8s.io/worker-index=0"
"""The label of a LeaderWorkerSet group's leader pod, the only one that serves HTTP."""
# Rendered in place of what only the pod knows, then replaced by the kubelet's variable references:
# the renderer checks every flag's value against the release's table, and these are not values yet.
_LEADER = "lws-leader-address"
_LEADER_REFERENCE = "$(LWS_LEADER_ADDRESS)"
_INDEX_REFERENCE = "$(LWS_WORKER_INDEX)"


@dataclass(frozen=True)
class ServerLaunch:
    """Everything the program knows about a server's pods before the cluster runs them."""

    kind: str
    """``Deployment`` (one node) or ``LeaderWorkerSet`` (several)."""
    name: str
    """The server object's name."""
    leader: ServerPod
    """The pod that serves HTTP (the only pod of a one-node server)."""
    worker: ServerPod | None
    """The other pods of a multi-node group; None on one node."""
    size: int
    """Pods per server."""
    labels: dict[str, str]
    """The pods' labels, the launch's digest among them."""
    instance: str
    """The launch's digest: another value is another launch (new pods, a new benchmark)."""
    command: str
    """The leader's command line as a shell would run it."""
    note: str
    """What the server serves, a `ServingNote`'s JSON (its annotation)."""
    flags: ServerFlags
    port: int
    gpus: int
    """``nvidia.com/gpu`` each pod requests."""

    @property
    def leader_selector(self) -> str:
        """The label that picks the pod serving HTTP among the launch's pods ("" for one pod)."""
        return LEADER_SELECTOR if self.worker is not None else ""


def _node_argv(argv: list[str], leader: str, *, worker: bool) -> list[str]:
    """A group member's argv with the leader's address, and a worker's rank as a variable reference."""
    words = [word.replace(_LEADER, leader) for word in argv]
    if worker:
        words[words.index("--node-rank") + 1] = _INDEX_REFERENCE
    return words


def server_launch(
    spec: StackSpec,
    flags: ServerFlags,
    *,
    stack: str,
    name: str,
    port: int,
    hub_token_secret: str | None = None,
) -> ServerLaunch:
    """The launch of stack ``stack``'s server with ``flags``, its object named ``name``, serving on
    ``port``; with ``hub_token_secret``, the pods read the hub token from that Secret."""
    cluster = spec.host.cluster
    assert cluster is not None  # a kubernetes host has a cluster section
    release = spec.environment.sglang_release
    module = LAUNCHER_MODULES[spec.runtime]
    env = {**spec.environment.env, **emulator_env(spec)}
    if spec.runtime == "emulator":
        # The emulated GPUs' records go in the container's own scratch space, whatever its user's home.
        env.setdefault("SGLANG_EMULATOR_STATE_DIR", "/tmp/sglang-emulator")
    draft = spec.draft_model
    if draft is not None and draft.source != "host":
        raise SpecError(
            "draftModel.source: local uploads from this machine, which a cluster host cannot do; put "
            "the draft model on the nodes at draftModel.path_on_host and set source: host (its sha256 "
            "is checked in the pod before the server starts)."
        )
    gpus, size = gpus_per_pod(spec), cluster.nodes
    secret_env = {HUB_TOKEN_VARIABLE: hub_token_secret} if hub_token_secret else {}

    def pod(argv: list[str], *, serves: bool) -> ServerPod:
        return ServerPod(
            image=cluster.image,
            pull_policy=cluster.image_pull_policy,
            command=[cluster.python, "-m", module],
            argv=argv,
            env=env,
            gpus=gpus,
            port=port,
            node_selector=cluster.selector(),
            stop_timeout_s=spec.launch.stop_timeout_s,
            draft_path=draft.path_on_host if draft else None,
            draft_sha256=draft.sha256 if draft else None,
            probe=serves,
            secret_env=secret_env,
        )

    worker = None
    with_port = flags.model_copy(update={"port": port})
    if size == 1:
        leader = pod(render_argv(with_port, release), serves=True)
        command = render_command(with_port, release, cluster.python, env, module)
    else:
        group = {"nnodes": size, "dist_init_addr": f"{_LEADER}:{cluster.dist_init_port}"}
        leader_flags = with_port.model_copy(update={**group, "node_rank": 0})
        address = cluster.leader_address or _LEADER_REFERENCE
        leader = pod(_node_argv(render_argv(leader_flags, release), address, worker=False), serves=True)
        worker_argv = render_argv(with_port.model_copy(update={**group, "node_rank": 1}), release)
        worker = pod(_node_argv(worker_argv, address, worker=True), serves=False)
        command = render_command(leader_flags, release, cluster.python, env, module).replace(
            _LEADER, shlex.quote(address)
        )
    labels = server_labels(stack, name)
    instance = digest(
        {
            "image": cluster.image,
            "leader": [*leader.command, *leader.argv],
            "worker": [*worker.command, *worker.argv] if worker else None,
            "env": env,
            "gpus": gpus,
            "selector": cluster.selector(),
            "draft": draft.model_dump(mode="json") if draft else None,
            # Only when set: the launches of stacks without a token keep their digests.
            **({"secret_env": secret_env} if secret_env else {}),
        }
    )
    note = ServingNote(stack=stack, pid=0, release=release, flags=flags, launch_command=command)
    return ServerLaunch(
        kind="Deployment" if worker is None else "LeaderWorkerSet",
        name=name,
        leader=leader,
        worker=worker,
        size=size,
        labels={**labels, INSTANCE_LABEL: instance},
        instance=instance,
        command=command,
        note=note.model_dump_json(),
        flags=flags,
        port=port,
        gpus=gpus,
    )
