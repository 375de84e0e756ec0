"""What a GPU host really has: one ``nvidia-smi`` round trip, parsed, and compared with the stack's
declared facts. The emulator host answers the same probe through its ``nvidia-smi`` stand-in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from sglang_stacks.errors import HostError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.nvidia_smi import (
    QUERY_APPS_FIELDS,
    QUERY_GPU_FIELDS,
    ComputeApp,
    GpuInfo,
    HostFacts,
    Interconnect,
    parse_compute_apps,
    parse_query_gpu,
    parse_topology,
)
from sglang_stacks.hostops.programs.probe_contract import NOT_INSTALLED, Probe, Steps
from sglang_stacks.hostops.programs.runner import call

__all__ = [
    "QUERY_GPU_FIELDS",
    "ComputeApp",
    "DeclaredFacts",
    "GpuInfo",
    "HostFacts",
    "compare_facts",
    "parse_compute_apps",
    "parse_query_gpu",
    "parse_topology",
    "probe",
    "stand_in",
]

# How far the reported memory may sit from the declared value before it is another GPU model
# (ECC mode and driver versions move memory.total by a few hundred MiB).
_MEMORY_TOLERANCE = 0.02


class DeclaredFacts(Protocol):
    """The facts a stack declares about its host (the host section of the stack spec)."""

    @property
    def gpu_model(self) -> str: ...
    @property
    def gpu_count(self) -> int: ...
    @property
    def memory_per_gpu_mib(self) -> int: ...
    @property
    def compute_capability(self) -> str: ...
    @property
    def interconnect(self) -> str: ...


def stand_in(variables: Mapping[str, str], python: str) -> list[str]:
    """The emulator's nvidia-smi, run by ``python`` with the emulator's ``variables``: what answers
    the probe on an emulated host."""
    return [
        "env",
        *(f"{k}={v}" for k, v in sorted(variables.items())),
        python,
        "-m",
        "sglang_emulator.nvidia_smi",
    ]


def probe(
    conn: Connection, *, nvidia_smi: Sequence[str] = ("nvidia-smi",), timeout_s: float = 60
) -> HostFacts:
    """Runs the probe on the host and parses what it printed; HostError when nvidia-smi fails."""
    steps = call(
        conn,
        Probe(
            nvidia_smi=tuple(nvidia_smi),
            gpu_fields=QUERY_GPU_FIELDS,
            app_fields=QUERY_APPS_FIELDS,
            limit_s=timeout_s,
        ),
    )
    command = " ".join(nvidia_smi)
    gpus = parse_query_gpu(_succeeded(conn, command, steps, "query-gpu"))
    if not gpus:
        raise HostError(
            f"nvidia-smi on {conn.label} lists no GPU. Check that the driver sees the GPUs "
            "(`nvidia-smi -L`) and that this user may use them."
        )
    # Some virtual machines refuse `topo -m`; with one GPU there are no links to read anyway.
    if len(gpus) == 1 and steps["topo"].exit_code != 0:
        interconnect: Interconnect = "single"
    else:
        interconnect = parse_topology(_succeeded(conn, command, steps, "topo"))
    return HostFacts(
        gpus=tuple(gpus),
        compute_apps=tuple(parse_compute_apps(_succeeded(conn, command, steps, "compute-apps"))),
        interconnect=interconnect,
    )


def _succeeded(conn: Connection, command: str, steps: Steps, section: str) -> str:
    """The output of one probe step; HostError with the tool's own message when it failed."""
    exit_code, text = steps[section].exit_code, steps[section].text
    if exit_code == 0:
        return text
    hint = (
        f"`{command}` is not installed there; install the NVIDIA driver"
        if exit_code == NOT_INSTALLED
        else "check the NVIDIA driver with `nvidia-smi` on the host"
    )
    raise HostError(
        f"`{command}` failed on {conn.label} (exit {exit_code}) in the {section} step: "
        f"{text.strip()[-400:] or 'no output'}. Fix: {hint}."
    )


def compare_facts(declared: DeclaredFacts, found: HostFacts) -> list[str]:
    """Each way the host differs from what the stack declares, as a sentence ending with the fix.

    An empty list means the host is what the stack says it is.
    """
    problems = []
    if declared.gpu_count != found.gpu_count:
        problems.append(
            f"host.gpu_count declares {declared.gpu_count} GPUs but {found.gpu_count} found "
            f"({found.gpu_model}); set host.gpu_count to {found.gpu_count} "
            "or point the stack at the right host."
        )
    wrong_model = [gpu for gpu in found.gpus if _model_key(gpu.name) != _model_key(declared.gpu_model)]
    if wrong_model:
        problems.append(
            f"host.gpu_model declares {declared.gpu_model!r} but GPU {wrong_model[0].index} is "
            f"{wrong_model[0].name!r}; set host.gpu_model to {wrong_model[0].name!r} or point the stack "
            "at the right host."
        )
    smallest = found.memory_per_gpu_mib
    if abs(smallest - declared.memory_per_gpu_mib) > _MEMORY_TOLERANCE * declared.memory_per_gpu_mib:
        problems.append(
            f"host.memory_per_gpu_mib declares {declared.memory_per_gpu_mib} MiB but the host's GPUs have "
            f"{smallest} MiB; set host.memory_per_gpu_mib to {smallest}."
        )
    if declared.compute_capability.strip() != found.compute_capability:
        problems.append(
            f"host.compute_capability declares {declared.compute_capability} but the GPUs report "
            f"{found.compute_capability}; set host.compute_capability to {found.compute_capability!r}."
        )
    # With one GPU there are no links to compare.
    if found.interconnect != "single" and declared.interconnect != found.interconnect:
        problems.append(
            f"host.interconnect declares {declared.interconnect} but the GPUs are linked by "
            f"{found.interconnect} (nvidia-smi topo -m); set host.interconnect to {found.interconnect!r}."
        )
    return problems


def _model_key(name: str) -> str:
    words = name.lower().split()
    return " ".join(words[1:] if words[:1] == ["nvidia"] else words)
