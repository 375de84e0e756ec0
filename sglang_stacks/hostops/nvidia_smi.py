"""nvidia-smi's output, parsed: the GPUs (``--query-gpu``), the processes holding GPU memory
(``--query-compute-apps``) and the interconnect (``topo -m``). Pure parsing, no host access.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from typing import Literal

from sglang_stacks.errors import HostError

Interconnect = Literal["pcie", "nvlink", "single"]

QUERY_GPU_FIELDS = (
    "index,uuid,name,memory.total,memory.used,memory.free,compute_cap,driver_version,pci.bus_id,power.limit"
)
"""The ``--query-gpu`` fields the probe asks for, in the order `parse_query_gpu` reads them."""
QUERY_APPS_FIELDS = "pid,process_name,used_memory,gpu_uuid"
"""The ``--query-compute-apps`` fields, in the order `parse_compute_apps` reads them."""

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


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
                f"{', '.join(row)!r}. Check that `nvidia-smi --query-compute-apps={QUERY_APPS_FIELDS} "
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
