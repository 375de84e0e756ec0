"""What a benchmark is given and what it gives: `BenchmarkInputs` (the server measured, the workload,
what the history records beside the numbers) and `BenchmarkOutputs` (each load level's result).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from sglang_stacks.config.benchmark_spec import BenchmarkSpec, GateSpec
from sglang_stacks.config.memory_advice import MemoryAdvice
from sglang_stacks.resources.provider import LABEL, REPLACES, REPLACES_IF_KNOWN, HostInputs, Props
from sglang_stacks.results import stats


class MeasuredServer(Props):
    """The server a benchmark measures, asked how it is when the benchmark fails."""

    pid: int
    start_ticks: int
    """With the pid, the process's identity (pids are reused)."""
    port: int
    log_path: str
    env: dict[str, str] = Field(default_factory=dict)
    """Its environment variables (NCCL's settings): the fix of its failure names values against them."""
    memory: MemoryAdvice | None = None
    """The memory plan of its SGLang release: an out-of-memory fix names a fraction from it."""


class MeasurementInputs(Props):
    """What every benchmark (a host's, a cluster's Job's) measures and records beside its numbers; a
    change of a ``REPLACES`` field means a new measurement."""

    stack: Annotated[str, LABEL]
    """The stack measured."""
    server_instance: Annotated[str, REPLACES]
    """The server launch measured: a new server means new numbers."""
    workload: Annotated[BenchmarkSpec, REPLACES]
    """The stack's benchmark section."""
    launch_command: Annotated[str, LABEL]
    """Recorded in the history beside the numbers."""
    sglang_version: Annotated[str, LABEL]
    """Recorded in the history beside the numbers."""
    flags_digest: Annotated[str, LABEL]
    """Recorded in the history beside the numbers."""
    gate: GateSpec | None = None
    """The regression gate, judged on the kept result when only it changes (no GPU time)."""
    gpu_hour_price: float | None = None
    """What one GPU costs per hour; a change re-prices the kept result."""
    gpu_count: int = 1
    """GPUs of the host, for the cost per million tokens."""


class BenchmarkInputs(HostInputs, MeasurementInputs):
    """What a host's benchmark measures (the stack measured must hold the host's claim)."""

    python: Annotated[str, REPLACES_IF_KNOWN]
    """The host's Python that runs the load generator."""
    url: Annotated[str, REPLACES]
    """The server's base URL as seen from the host."""
    state_dir: Annotated[str, LABEL]
    """The host's folder of sglang-stacks state (claim, progress file)."""
    update_id: Annotated[str, LABEL]
    """The running update, for the claim."""
    server: Annotated[MeasuredServer | None, LABEL] = None
    """The one server measured (none behind a router): a failed benchmark asks it how it is."""
    own_urn: Annotated[str, LABEL] = ""
    """This benchmark's URN, for its progress on its row of ``pulumi up`` (`engine_status`)."""


class BenchmarkOutputs(Props):
    """The measurement."""

    levels: list[stats.BenchmarkResult] = Field(min_length=1)
    """The metrics at each load level; the first level's are the stack's headline (its tok/s)."""
