"""One host's resources up to a ready server, in the order the GPUs require: the Python
environment, the probe, the draft model, the claim, the server. Built the same way for a stack's
single host (`SGLangDeployment`) and for each host of a fleet (`Fleet`).

The claim comes after everything that can fail without the GPUs (probe, environment, draft
model, the installed release): taking the host over stops another stack's server, so a failing
update of this stack leaves the other one serving.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi

from sglang_stacks.components.draft_model import DraftModel, draft_model_args
from sglang_stacks.components.environment import PythonEnvironment, environment_args
from sglang_stacks.components.host import FACT_KEYS, ClaimArgs, GpuClaim, HostProbe, ProbeArgs
from sglang_stacks.components.server import ServerArgs, SGLangServer
from sglang_stacks.config.flags import ServerFlags
from sglang_stacks.config.memory_advice import memory_advice
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.resources.benchmark_shape import MeasuredServer
from sglang_stacks.resources.wiring import emulator_env, launch_flags, nvidia_smi_command

DEFAULT_PORT = 30000
"""SGLang's port when the stack sets none."""


@dataclass(frozen=True)
class HostParts:
    """The resources of one host, and what the benchmark and the outputs read from them."""

    environment: PythonEnvironment
    probe: HostProbe
    claim: GpuClaim
    draft: DraftModel | None
    server: SGLangServer
    launch_flags: ServerFlags
    """The launch flags the server is launched with."""
    port: int
    """The server's port on the host."""


@dataclass(frozen=True)
class HostPlan:
    """Where one host's resources go and what they wait for."""

    name: str
    """Prefix of every resource's name (``<name>-server``...)."""
    stack: str
    connection: pulumi.Output[Any]
    update_id: str
    hub_token: pulumi.Output[str] | None = None
    venv_path: str | None = None
    """The environment's folder on the host; None for the shared default."""
    environment_after: Sequence[pulumi.Resource] = ()
    """Resources the environment waits for (installs one host at a time)."""
    server_after: Sequence[pulumi.Resource] = ()
    """Resources the server waits for besides its own host's (a fleet's previous batch)."""
    claim_after: Sequence[pulumi.Resource] = ()
    """GPU-free checks the claim waits for besides the host's own (a multi-node server's init
    address)."""
    node: NodeRole | None = None
    """The host's part in a multi-node server; None for a server on one host."""


@dataclass(frozen=True)
class NodeRole:
    """What a node of a multi-node server launches with beyond a one-host server."""

    ready_line: str = ""
    """Nodes other than rank 0 serve no HTTP: started once the log shows this line."""
    group: pulumi.Input[Sequence[Any]] = ()
    """The other nodes (connection, state folder, rank), which a refresh checks."""
    group_instances: pulumi.Input[Sequence[pulumi.Input[str]]] = ()
    """Rank 0: the launches of the other nodes."""


def server_log_dir(spec: StackSpec) -> str:
    """The host's folder of the server's logs, one file per launch: ``launch.log_dir``, by default
    ``<host.state_dir>/logs`` (``sglang-stacks logs`` reads them there)."""
    return spec.launch.log_dir or f"{spec.host.state_dir.rstrip('/')}/logs"


def build_host_parts(parent: pulumi.Resource, spec: StackSpec, plan: HostPlan) -> HostParts:
    """Creates one host's resources, children of ``parent``."""
    child = pulumi.ResourceOptions(parent=parent)
    release = spec.environment.sglang_release
    environment = PythonEnvironment(
        f"{plan.name}-environment",
        environment_args(
            plan.connection, spec.runtime, release, spec.environment.extra_pins, venv_path=plan.venv_path
        ),
        pulumi.ResourceOptions(parent=parent, depends_on=list(plan.environment_after)),
    )
    python = environment.output(lambda o: o.python)
    installed = environment.output(lambda o: o.sglang_version)
    nvidia_smi = nvidia_smi_command(spec, python)
    probe = HostProbe(
        f"{plan.name}-probe",
        ProbeArgs(
            connection=plan.connection,
            declared={key: getattr(spec.host, key) for key in FACT_KEYS},
            nvidia_smi=nvidia_smi,
        ),
        child,
    )
    draft = _draft(parent, spec, plan)
    gpu_free: list[pulumi.Resource] = [probe, environment, *([draft] if draft else []), *plan.claim_after]
    claim = GpuClaim(
        f"{plan.name}-claim",
        ClaimArgs(
            connection=plan.connection,
            stack=plan.stack,
            update_id=plan.update_id,
            nvidia_smi=nvidia_smi,
            state_dir=spec.host.state_dir,
            takeover=spec.launch.takeover,
            stop_timeout_s=spec.launch.stop_timeout_s,
            release=release,
            installed_version=installed,
        ),
        pulumi.ResourceOptions(parent=parent, depends_on=gpu_free),
    )
    flags = launch_flags(spec)
    port = spec.server.port or DEFAULT_PORT
    hub_token = plan.hub_token
    node = plan.node or NodeRole()
    server = SGLangServer(
        f"{plan.name}-server",
        ServerArgs(
            connection=plan.connection,
            stack=plan.stack,
            python=python,
            launcher_module=environment.input(lambda i: i.launcher_module),
            runtime=spec.runtime,
            extra_pins=spec.environment.extra_pins,
            flags=flags,
            release=release,
            installed_version=installed,
            env={**spec.environment.env, **emulator_env(spec)},
            secret_env=hub_token.apply(lambda token: {"HF_TOKEN": token}) if hub_token else None,
            port=port,
            nvidia_smi=nvidia_smi,
            draft_digest=draft.output(lambda o: o.digest) if draft else "",
            state_dir=spec.host.state_dir,
            update_id=plan.update_id,
            log_dir=server_log_dir(spec),
            ready_timeout_s=spec.launch.ready_timeout_s,
            stop_timeout_s=spec.launch.stop_timeout_s,
            taken_from=claim.output(lambda o: o.taken_from),
            taken_in_update=claim.output(lambda o: o.taken_in_update),
            ready_line=node.ready_line,
            group=node.group,
            group_instances=node.group_instances,
            memory=memory_advice(spec),
        ),
        pulumi.ResourceOptions(parent=parent, depends_on=[claim, *gpu_free, *plan.server_after]),
    )
    return HostParts(environment, probe, claim, draft, server, flags, port)


def _draft(parent: pulumi.Resource, spec: StackSpec, plan: HostPlan) -> DraftModel | None:
    if spec.draft_model is None:
        return None
    declared = spec.draft_model
    return DraftModel(
        f"{plan.name}-draft-model",
        draft_model_args(
            plan.connection,
            declared.source,
            declared.path_on_host,
            local_path=declared.local_path,
            sha256=declared.sha256,
            sha256_manifest=declared.sha256_manifest,
        ),
        pulumi.ResourceOptions(parent=parent),
    )


def measured_server(server: SGLangServer, port: int) -> pulumi.Output[MeasuredServer]:
    """The `MeasuredServer` of a benchmark of ``server``, which serves on ``port``."""
    return pulumi.Output.all(
        server.output(lambda o: o.pid),
        server.output(lambda o: o.start_ticks),
        server.output(lambda o: o.log_path),
        server.input(lambda i: i.env),
        server.input(lambda i: i.memory),
    ).apply(
        lambda found: MeasuredServer(
            pid=found[0], start_ticks=found[1], port=port, log_path=found[2], env=found[3], memory=found[4]
        )
    )
