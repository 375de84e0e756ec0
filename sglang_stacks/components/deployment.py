"""One stack's deployment: the GPU host, its Python environment, the draft model, the SGLang server
and its benchmark, built from the stack spec in the order the GPUs require.

Nothing touches the GPUs before the host is probed and claimed, and the claim (which may stop
another stack's server) waits for everything that can fail without the GPUs; the server waits
for all of them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pulumi

from sglang_stacks.components._host_parts import DEFAULT_PORT, HostPlan, build_host_parts, measured_server
from sglang_stacks.components.benchmark import Benchmark, BenchmarkArgs, measured_outputs
from sglang_stacks.config import preflight
from sglang_stacks.config.flags import ServerFlags
from sglang_stacks.config.memory import plan_memory
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.errors import SpecError, StacksError
from sglang_stacks.hostops import serving
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.resources.resource import Args, args_for, register
from sglang_stacks.resources.wiring import (
    connection_args,
    flags_digest,
    host_connection,
    launch_flags,
    served_now,
    warn_pending,
)
from sglang_stacks.results.outputs import DeploymentOutputs

if TYPE_CHECKING:
    from pulumi_command.remote import ConnectionArgs

__all__ = ["DEFAULT_PORT", "DeploymentArgs", "DeploymentExports", "SGLangDeployment", "connection_args"]


@dataclass(frozen=True)
class DeploymentArgs:
    """What a deployment is made of: the stack's spec, the way to its host and its secrets."""

    stack: str
    """The stack's name: it owns the host's GPUs while deployed."""
    spec: StackSpec
    """The validated stack spec."""
    connection: ConnectionArgs | None = None
    """How to reach an SSH host, as pulumi-command's ``remote.ConnectionArgs`` (its private key a
    Pulumi secret); ``None`` for the emulator host. `connection_args` builds it from the spec."""
    hub_token: pulumi.Output[str] | None = None
    """A Hugging Face token for gated models, a Pulumi secret; the server gets it as HF_TOKEN."""


DeploymentExports = args_for(DeploymentOutputs)
"""A deployment's outputs as it registers them: the fields of `DeploymentOutputs`, each an Output."""


class SGLangDeployment(pulumi.ComponentResource):
    """The whole configuration of one stack on its GPU host, benchmarked.

    Children, in the order the GPUs require: the host's probe and claim, the Python environment,
    the draft model, the server (after all of those), the benchmark (after the server).
    """

    outputs: Args[DeploymentOutputs]
    """The deployment's outputs, the fields of `DeploymentOutputs` (``__main__.py`` exports them as
    the stack's outputs)."""

    def __init__(self, name: str, args: DeploymentArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("sglang-stacks:index:SGLangDeployment", name, None, opts)
        spec, stack = args.spec, args.stack
        warn_pending(stack, self)
        release = spec.environment.sglang_release
        found = self._preflight(spec, stack)
        connection = host_connection(args.connection)
        # New on every run; the resources take it as a label for the claim, never as a change.
        update_id = uuid.uuid4().hex[:12]
        if pulumi.runtime.is_dry_run():
            flags = launch_flags(spec)
            connection.apply(
                lambda fields: self._announce(fields, stack, spec.host.state_dir, flags, release)
            )
        plan = HostPlan(name, stack, connection, update_id, hub_token=args.hub_token)
        parts = build_host_parts(self, spec, plan)
        server, environment = parts.server, parts.environment
        benchmark = Benchmark(
            f"{name}-benchmark",
            BenchmarkArgs(
                connection=connection,
                stack=stack,
                python=environment.output(lambda o: o.python),
                url=server.output(lambda o: o.url),
                server_instance=server.output(lambda o: o.instance),
                launch_command=server.output(lambda o: o.launch_command),
                sglang_version=environment.output(lambda o: o.sglang_version),
                flags_digest=flags_digest(parts.launch_flags),
                workload=spec.benchmark,
                gate=spec.gate,
                gpu_hour_price=spec.host.gpu_hour_price,
                gpu_count=spec.host.gpu_count,
                state_dir=spec.host.state_dir,
                update_id=update_id,
                server=measured_server(server, parts.port),
            ),
            pulumi.ResourceOptions(parent=self),
        )
        self.outputs = DeploymentExports(
            **measured_outputs(benchmark, spec.benchmark),
            launch_command=server.output(lambda o: o.launch_command),
            launch_flags=parts.launch_flags,
            sglang_version=environment.output(lambda o: o.sglang_version),
            host=parts.probe.output(lambda o: o.facts),
            server_log=server.output(lambda o: o.log_path),
            preflight=[f for f in found if f.severity != "info"],  # notes: `sglang-stacks render`
            memory_plan=plan_memory(spec, release),
        )
        register(self, self.outputs)

    def _preflight(self, spec: StackSpec, stack: str) -> list[preflight.Finding]:
        """Stops a knowably doomed configuration before any resource exists; warns about the rest."""
        if spec.gate is not None and spec.gate.baseline_stack == stack:
            raise SpecError(
                f"gate.baseline_stack names this stack ({stack}), so the gate would compare it with "
                "itself. Name the stack to compare with, such as baseline."
            )
        found = preflight.run_preflight(spec, spec.environment.sglang_release)
        preflight.raise_on_errors(found)
        for finding in found:
            if finding.severity == "warning":
                pulumi.log.warn(finding.sentence(), self)
        return found

    def _announce(self, fields: Any, stack: str, state_dir: str, flags: ServerFlags, release: str) -> None:
        """Says in the preview how this stack differs from the server the host runs now."""
        try:
            conn = Connection(**fields)
            current = served_now(conn, state_dir, release)
            note = serving.describe(current, stack, flags, release, conn.label)
        except StacksError:
            return  # an unreachable host fails the probe, with its own message
        pulumi.log.info(note, self)
