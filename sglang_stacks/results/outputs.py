"""The stack outputs, one model per kind of stack: `DeploymentOutputs` (a stack on one host) and
`FleetOutputs` (a fleet behind SGLang's router). ``__main__.py`` exports a stack's outputs from its
model, and everything that reads them (``rollout``, ``compare``, campaigns, the CLI) reads them back
into it.

Outputs arrive as ``pulumi stack output --json`` prints them (Pulumi leaves out outputs whose value
is null). Outputs written by earlier versions of the tool are read in today's shape: launch flags
recorded as rendered options, or only as the launch command, become the typed flags.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, PlainSerializer, model_validator

from sglang_stacks.config.findings import Finding
from sglang_stacks.config.flags import LaunchFlags
from sglang_stacks.config.memory_plan import MemoryPlan
from sglang_stacks.hostops.facts import FoundFacts
from sglang_stacks.results.output_form import benchmark_read, benchmark_written, memory_written
from sglang_stacks.results.stats import BenchmarkResult, Goodput
from sglang_stacks.results.verdict import CanaryVerdict
from sglang_stacks.shape import Shape

__all__ = ["DeploymentOutputs", "FleetOutputs", "ReplicaOutputs"]

MemoryPlanOutput = Annotated[MemoryPlan, PlainSerializer(memory_written)]
"""The memory plan as the stack output shows it: its headline figures, a line each (the whole plan is
``sglang-stacks render``'s)."""

Result = Annotated[BenchmarkResult, BeforeValidator(benchmark_read), PlainSerializer(benchmark_written)]
"""A benchmark result as the stack output shows it: what was not measured (no SLO, no price, no
speculative decoding) left out rather than printed as null, each latency's percentiles and the runs
on one line (`sglang_stacks.results.output_form`)."""
Levels = list[Result]


class _Outputs(Shape):
    model_config = ConfigDict(frozen=True, extra="ignore")


def _upgraded_flags(outputs: Mapping[str, Any]) -> Any:
    """The launch flags of outputs from earlier versions: a map of rendered options (``--flag`` ->
    its words), or only the launch command."""
    from sglang_stacks.config.recorded import values_from_argv, values_from_options

    release = str(outputs.get("sglang_version") or "")
    flags = outputs.get("launch_flags")
    if isinstance(flags, Mapping) and any(str(key).startswith("-") for key in flags):
        return values_from_options(flags, release)
    if flags is not None:
        return flags
    argv = outputs.get("launch_argv")
    if argv is None and isinstance(outputs.get("launch_command"), str):
        argv = shlex.split(outputs["launch_command"])
    if not isinstance(argv, list | tuple):
        raise ValueError("none of the outputs launch_argv, launch_flags or launch_command is set")
    words = [str(word) for word in argv]
    start = next((i for i, word in enumerate(words) if word.startswith("--")), len(words))
    return values_from_argv(words[start:], release)


class DeploymentOutputs(_Outputs):
    """The outputs of a stack on one host (`SGLangDeployment`)."""

    tok_s: float
    """Output tokens per second at the benchmark's first load level, mean over repetitions."""
    benchmark: Result
    """Every metric of the first load level."""
    benchmark_levels: Levels = Field(default_factory=list)
    """The metrics at each load level, when there is more than one (the one is ``benchmark``)."""
    goodput: Goodput | None = None
    """Throughput within the benchmark's SLO at the first level; none without an SLO."""
    launch_command: str
    """The exact command the server runs."""
    launch_flags: LaunchFlags
    """The launch flags, by canonical name."""
    sglang_version: str
    """The SGLang release installed on the host (emulated on the emulator)."""
    host: FoundFacts | None = None
    """What nvidia-smi reports about the host."""
    server_log: str = ""
    """The server's log file on the host."""
    preflight: list[Finding] = Field(default_factory=list)
    """Preflight warnings (errors stop the program before anything is deployed; its notes are in
    ``sglang-stacks render``)."""
    memory_plan: MemoryPlanOutput | None = None
    """The memory planner's per-GPU budget for this configuration."""

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, outputs: Any) -> Any:
        if not isinstance(outputs, Mapping):
            return outputs
        return {**outputs, "launch_flags": _upgraded_flags(outputs)}

    @property
    def levels(self) -> list[BenchmarkResult]:
        """The metrics at each load level, the one of a single-level benchmark included."""
        return list(self.benchmark_levels) or [self.benchmark]


class ReplicaOutputs(_Outputs):
    """One replica of a fleet."""

    host: int
    """The replica's index (its first host's, for a multi-node replica)."""
    url: str
    """Where the router reaches it."""
    launch_command: str
    """The exact command its server runs."""
    tok_s: float | None = None
    """Its own benchmark's output tokens per second, measured before it joined the router; none
    for a worker of a disaggregated fleet, which serves only in a pair (see the fleet's)."""
    role: Literal["prefill", "decode"] | None = None
    """Its role in a disaggregated fleet; none in an aggregated one."""


class FleetOutputs(_Outputs):
    """The outputs of a fleet behind SGLang's router (`Fleet`, or `KubeFleet` on a cluster)."""

    tok_s: float
    """Output tokens per second through the router at the benchmark's first load level."""
    router_url: str
    """Where clients send requests (on a cluster: the router's pod, at its node's address)."""
    router_service: str | None = None
    """On a cluster: the router's Service, as clients inside the cluster reach it
    (``http://<name>.<namespace>.svc:<port>``); none for a fleet of hosts."""
    benchmark_levels: Levels
    """The benchmark through the router at each load level."""
    replicas: list[ReplicaOutputs]
    """Each replica: host, URL, launch command, tok/s on its own."""
    canary: CanaryVerdict | None = None
    """The canary gate's verdict on the last rolling update: both measurements, the change, the
    decision; none without a canary."""
    launch_flags: LaunchFlags
    """The launch flags every replica shares, by canonical name."""
    role_canaries: dict[Literal["prefill", "decode"], CanaryVerdict] | None = None
    """A disaggregated fleet's canary verdicts, per role (the role's first worker judged in a pair
    beside its second); none without a canary, and for an aggregated fleet (``canary``)."""
    role_flags: dict[Literal["prefill", "decode"], LaunchFlags] | None = None
    """A disaggregated fleet's launch flags per role (the shared ones with the role's own and the
    role flags); none for an aggregated fleet, and in states written before roles existed."""
    sglang_version: str | None = None
    """The SGLang release the replicas run; none in states written before it was recorded."""

    @property
    def levels(self) -> list[BenchmarkResult]:
        """The benchmark through the router at each load level (as `DeploymentOutputs.levels`)."""
        return list(self.benchmark_levels)
