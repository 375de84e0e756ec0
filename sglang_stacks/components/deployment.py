"""One stack's deployment: the GPU host, its Python environment, the draft model, the SGLang server
and its benchmark, built from the stack spec in the order the GPUs require.

Nothing touches the GPUs before the host is probed and claimed, and the claim (which may stop
another stack's server) waits for everything that can fail without the GPUs; the server waits
for all of them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pulumi

from sglang_stacks.components._host_parts import DEFAULT_PORT, HostPlan, build_host_parts
from sglang_stacks.components._provider import host_connection
from sglang_stacks.components._wiring import (
    connection_args,
    flags_digest,
    options_of,
    render_flags,
    served_now,
)
from sglang_stacks.components.benchmark import Benchmark
from sglang_stacks.config import preflight
from sglang_stacks.config.memory import plan_memory
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.errors import SpecError, StacksError
from sglang_stacks.hostops import serving
from sglang_stacks.hostops.connection import Connection

if TYPE_CHECKING:
    from pulumi_command.remote import ConnectionArgs

__all__ = ["DEFAULT_PORT", "DeploymentArgs", "SGLangDeployment", "connection_args", "render_flags"]


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


_OUTPUTS = (
    "tok_s",
    "benchmark",
    "benchmark_levels",
    "goodput",
    "launch_command",
    "launch_flags",
    "sglang_version",
    "host_facts",
    "findings",
    "memory_plan",
    "server_log",
)


class SGLangDeployment(pulumi.ComponentResource):
    """The whole configuration of one stack on its GPU host, benchmarked.

    Children, in the order the GPUs require: the host's probe and claim, the Python environment,
    the draft model, the server (after all of those), the benchmark (after the server).
    """

    tok_s: pulumi.Output[float]
    """Single-stream (first concurrency level) output tokens per second."""
    benchmark: pulumi.Output[dict[str, Any]]
    """Every metric of the first concurrency level."""
    benchmark_levels: pulumi.Output[list[dict[str, Any]]]
    """The metrics at each load level."""
    goodput: pulumi.Output[dict[str, Any] | None]
    """Requests and tokens per second within the benchmark's SLO (first level); None without an SLO."""
    launch_command: pulumi.Output[str]
    """The exact command the server runs."""
    launch_flags: pulumi.Output[dict[str, Any]]
    """The launch flags by canonical name, as rendered for the stack's release."""
    sglang_version: pulumi.Output[str]
    """The SGLang release installed on the host (emulated on the emulator)."""
    host_facts: pulumi.Output[dict[str, Any]]
    """What nvidia-smi reports about the host."""
    findings: pulumi.Output[list[dict[str, str]]]
    """Preflight warnings and notes (errors stop the program before this exists)."""
    memory_plan: pulumi.Output[dict[str, Any]]
    """The memory planner's per-GPU budget for this configuration."""
    server_log: pulumi.Output[str]
    """The server's log file on the host."""

    def __init__(self, name: str, args: DeploymentArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("sglang-stacks:index:SGLangDeployment", name, None, opts)
        spec, stack = args.spec, args.stack
        found = self._preflight(spec, stack)
        connection = host_connection(args.connection)
        # New on every run; the resources take it as a label for the claim, never as a change.
        update_id = uuid.uuid4().hex[:12]
        if pulumi.runtime.is_dry_run():
            flags, release = render_flags(spec), spec.environment.sglang_release
            connection.apply(
                lambda fields: self._announce(fields, stack, spec.host.state_dir, flags, release)
            )
        plan = HostPlan(name, stack, connection, update_id, hub_token=args.hub_token)
        parts = build_host_parts(self, spec, plan)
        server, environment = parts.server, parts.environment
        benchmark = Benchmark(
            f"{name}-benchmark",
            connection=connection,
            stack=stack,
            python=environment.python,
            url=server.url,
            server_instance=server.instance,
            launch_command=server.launch_command,
            sglang_version=environment.sglang_version,
            flags_digest=flags_digest(parts.launch_flags),
            workload=spec.benchmark,
            gate=spec.gate,
            gpu_hour_price=spec.host.gpu_hour_price,
            gpu_count=spec.host.gpu_count,
            state_dir=spec.host.state_dir,
            update_id=update_id,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.tok_s = benchmark.tok_s
        self.benchmark = benchmark.result
        self.benchmark_levels = benchmark.levels
        self.goodput = benchmark.goodput
        self.launch_command = server.launch_command
        self.launch_flags = pulumi.Output.from_input(dict(parts.launch_flags))
        self.sglang_version = environment.sglang_version
        self.host_facts = parts.probe.facts
        self.findings = pulumi.Output.from_input([vars(finding) for finding in found])
        self.memory_plan = pulumi.Output.from_input(
            plan_memory(spec, spec.environment.sglang_release).as_dict()
        )
        self.server_log = server.log_path
        self.register_outputs({key: getattr(self, key) for key in _OUTPUTS})

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

    def _announce(
        self, fields: Mapping[str, Any], stack: str, state_dir: str, flags: Mapping[str, Any], release: str
    ) -> None:
        """Says in the preview how this stack differs from the server the host runs now."""
        try:
            conn = Connection(**fields)
            current = served_now(conn, state_dir, release)
            note = serving.describe(current, stack, options_of(flags, release), conn.label)
        except StacksError:
            return  # an unreachable host fails the probe, with its own message
        pulumi.log.info(note, self)
