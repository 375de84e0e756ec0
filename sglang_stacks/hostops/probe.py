"""What a GPU host really has: one ``nvidia-smi`` round trip, parsed, and compared with the stack's
declared facts. The emulator host answers the same probe through its ``nvidia-smi`` stand-in.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from sglang_stacks.errors import HostError
from sglang_stacks.hostops.programs import run_bash
from sglang_stacks.hostops.transport import Connection

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
]

QUERY_GPU_FIELDS = (
    "index,uuid,name,memory.total,memory.used,memory.free,compute_cap,driver_version,pci.bus_id,power.limit"
)
"""The ``--query-gpu`` fields the probe asks for, in the order `parse_query_gpu` reads them."""
_QUERY_APPS_FIELDS = "pid,process_name,used_memory,gpu_uuid"
# The sections probe.sh prints, in order.
_SECTIONS = ("query-gpu", "compute-apps", "topo")
_SECTION_LINE = re.compile(r"^@@sglang-stacks (begin|end) (\S+)(?: (\d+))?$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# How far the reported memory may sit from the declared value before it is another GPU model
# (ECC mode and driver versions move memory.total by a few hundred MiB).
_MEMORY_TOLERANCE = 0.02

Interconnect = Literal["pcie", "nvlink", "single"]


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as ``nvidia-smi --query-gpu`` reports it."""

    index: int
    uuid: str
    name: str
    memory_total_mib: int
    memory_used_mib: int
    memory_free_mib: int
    compute_cap: str
    """CUDA compute capability, ``"9.0"`` for SM90."""
    driver_version: str
    pci_bus_id: str
    power_limit_w: float | None
    """None when the board does not report it (``[N/A]``)."""


@dataclass(frozen=True)
class ComputeApp:
    """A process holding GPU memory, from ``nvidia-smi --query-compute-apps``."""

    pid: int
    process_name: str
    used_memory_mib: int | None
    """None when the driver cannot tell (``[N/A]``, as inside some containers)."""
    gpu_uuid: str


@dataclass(frozen=True)
class HostFacts:
    """Everything the probe found on the host."""

    gpus: tuple[GpuInfo, ...]
    compute_apps: tuple[ComputeApp, ...]
    interconnect: Interconnect

    @property
    def gpu_count(self) -> int:
        """How many GPUs the host has."""
        return len(self.gpus)

    @property
    def gpu_model(self) -> str:
        """The name of GPU 0 (``mixed: A, B`` when the GPUs differ)."""
        names = sorted({gpu.name for gpu in self.gpus})
        return names[0] if len(names) == 1 else "mixed: " + ", ".join(names)

    @property
    def memory_per_gpu_mib(self) -> int:
        """The smallest GPU's total memory: what a tensor-parallel rank can count on."""
        return min(gpu.memory_total_mib for gpu in self.gpus)

    @property
    def compute_capability(self) -> str:
        """The compute capability of GPU 0."""
        return self.gpus[0].compute_cap

    @property
    def driver_version(self) -> str:
        """The NVIDIA driver version."""
        return self.gpus[0].driver_version

    def summary(self) -> dict[str, object]:
        """The facts as plain values, for stack outputs."""
        return {
            "gpu_model": self.gpu_model,
            "gpu_count": self.gpu_count,
            "memory_per_gpu_mib": self.memory_per_gpu_mib,
            "compute_capability": self.compute_capability,
            "interconnect": self.interconnect,
            "driver_version": self.driver_version,
            "memory_used_mib": [gpu.memory_used_mib for gpu in self.gpus],
            "compute_apps": [f"{app.pid} {app.process_name}" for app in self.compute_apps],
        }


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


def parse_query_gpu(csv_text: str) -> list[GpuInfo]:
    """Reads ``--query-gpu=<QUERY_GPU_FIELDS> --format=csv,noheader,nounits`` output."""
    gpus = []
    for row in _csv_rows(csv_text):
        if row[0] == "index":  # a header line, when --format had no noheader
            continue
        if len(row) != 10:
            raise HostError(
                f"nvidia-smi printed a GPU line with {len(row)} fields where 10 were asked for: "
                f"{', '.join(row)!r}. Check that `nvidia-smi --query-gpu={QUERY_GPU_FIELDS} "
                "--format=csv,noheader,nounits` works on the host."
            )
        index, uuid, name, total, used, free, cap, driver, bus_id, power = row
        gpus.append(
            GpuInfo(
                index=_integer(index, "index"),
                uuid=uuid,
                name=name,
                memory_total_mib=_integer(total, "memory.total"),
                memory_used_mib=_integer(used, "memory.used"),
                memory_free_mib=_integer(free, "memory.free"),
                compute_cap=cap,
                driver_version=driver,
                pci_bus_id=bus_id,
                power_limit_w=None if _missing(power) else _number(power, "power.limit"),
            )
        )
    return gpus


def parse_compute_apps(csv_text: str) -> list[ComputeApp]:
    """Reads ``--query-compute-apps=pid,process_name,used_memory,gpu_uuid`` (noheader, nounits)."""
    apps = []
    for row in _csv_rows(csv_text):
        if row[0] == "pid" or row[0].startswith("No running"):
            continue
        if len(row) != 4:
            raise HostError(
                f"nvidia-smi printed a process line with {len(row)} fields where 4 were asked for: "
                f"{', '.join(row)!r}. Check that `nvidia-smi --query-compute-apps={_QUERY_APPS_FIELDS} "
                "--format=csv,noheader,nounits` works on the host."
            )
        pid, process_name, used, gpu_uuid = row
        apps.append(
            ComputeApp(
                pid=_integer(pid, "pid"),
                process_name=process_name,
                used_memory_mib=None if _missing(used) else _integer(used, "used_memory"),
                gpu_uuid=gpu_uuid,
            )
        )
    return apps


def parse_topology(topo_text: str) -> Interconnect:
    """Reads ``nvidia-smi topo -m``: ``nvlink`` when every GPU pair has NVLinks (``NV#``),
    ``pcie`` when any pair talks over PCIe, ``single`` for one GPU.

    GPUs bridged in pairs count as ``pcie``: tensor parallelism over all of them still crosses PCIe.
    """
    lines = [_ANSI.sub("", line) for line in topo_text.splitlines()]
    header = next((line for line in lines if re.search(r"\tGPU0(\t|$)", line)), None)
    if header is None:
        raise HostError(
            "nvidia-smi topo -m printed no GPU matrix (no GPU0 column). "
            "Run `nvidia-smi topo -m` on the host to see why."
        )
    gpu_columns = [cell.strip() for cell in header.split("\t")[1:]]
    gpu_count = sum(1 for cell in gpu_columns if re.fullmatch(r"GPU\d+", cell))
    if gpu_count == 1:
        return "single"
    links = []
    for line in lines:
        cells = line.split("\t")
        if re.fullmatch(r"GPU\d+", cells[0].strip()):
            links += [cell.strip() for cell in cells[1 : gpu_count + 1]]
    pairs = [link for link in links if link != "X"]
    if len(pairs) != gpu_count * (gpu_count - 1):
        raise HostError(
            f"nvidia-smi topo -m printed an incomplete {gpu_count}-GPU matrix. "
            "Run `nvidia-smi topo -m` on the host to see why."
        )
    return "nvlink" if all(re.fullmatch(r"NV\d+", link) for link in pairs) else "pcie"


def probe(
    conn: Connection, *, nvidia_smi: Sequence[str] = ("nvidia-smi",), timeout_s: float = 60
) -> HostFacts:
    """Runs the probe on the host and parses what it printed; HostError when nvidia-smi fails."""
    params = {
        "nvidia_smi": "\n".join(nvidia_smi),
        "gpu_fields": QUERY_GPU_FIELDS,
        "app_fields": _QUERY_APPS_FIELDS,
    }
    result = run_bash(conn, "probe.sh", params, timeout_s=timeout_s)
    sections = _sections(result.stdout)
    command = " ".join(nvidia_smi)
    for section in _SECTIONS:
        if section not in sections:
            raise HostError(
                f"The GPU probe on {conn.label} stopped before its {section} step "
                f"(exit {result.exit_code}). {result.stderr.strip()} Run `{command}` on the host to see why."
            )
    gpus = parse_query_gpu(_succeeded(conn, command, sections, "query-gpu"))
    if not gpus:
        raise HostError(
            f"nvidia-smi on {conn.label} lists no GPU. Check that the driver sees the GPUs "
            "(`nvidia-smi -L`) and that this user may use them."
        )
    # Some virtual machines refuse `topo -m`; with one GPU there are no links to read anyway.
    if len(gpus) == 1 and sections["topo"][0] != 0:
        interconnect: Interconnect = "single"
    else:
        interconnect = parse_topology(_succeeded(conn, command, sections, "topo"))
    return HostFacts(
        gpus=tuple(gpus),
        compute_apps=tuple(parse_compute_apps(_succeeded(conn, command, sections, "compute-apps"))),
        interconnect=interconnect,
    )


def _succeeded(conn: Connection, command: str, sections: dict[str, tuple[int, str]], section: str) -> str:
    """The output of one probe step; HostError with the tool's own message when it failed."""
    exit_code, text = sections[section]
    if exit_code == 0:
        return text
    hint = (
        f"`{command}` is not installed there; install the NVIDIA driver"
        if exit_code == 127
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


def _sections(stdout: str) -> dict[str, tuple[int, str]]:
    sections: dict[str, tuple[int, str]] = {}
    current: str | None = None
    body: list[str] = []
    for line in stdout.splitlines():
        marker = _SECTION_LINE.match(line)
        if marker and marker.group(1) == "begin":
            current, body = marker.group(2), []
        elif marker and current == marker.group(2) and marker.group(3) is not None:
            sections[current] = (int(marker.group(3)), "\n".join(body) + "\n")
            current = None
        elif current is not None:
            body.append(line)
    return sections


def _csv_rows(text: str) -> list[list[str]]:
    rows = csv.reader(text.strip().splitlines(), skipinitialspace=True)
    return [[cell.strip() for cell in row] for row in rows if row and any(cell.strip() for cell in row)]


def _missing(value: str) -> bool:
    return value.startswith("[") or value in ("N/A", "")


def _integer(value: str, field: str) -> int:
    try:
        return int(value.split()[0])
    except (ValueError, IndexError):
        raise HostError(
            f"nvidia-smi printed {value!r} for {field}, which is not a number. "
            "Check the driver with `nvidia-smi` on the host."
        ) from None


def _number(value: str, field: str) -> float:
    try:
        return float(value.split()[0])
    except (ValueError, IndexError):
        raise HostError(
            f"nvidia-smi printed {value!r} for {field}, which is not a number. "
            "Check the driver with `nvidia-smi` on the host."
        ) from None


def _model_key(name: str) -> str:
    words = name.lower().split()
    return " ".join(words[1:] if words[:1] == ["nvidia"] else words)
