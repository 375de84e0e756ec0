"""An ``nvidia-smi`` for the emulated host: the profile's GPUs in the real tool's output formats.

Run as ``python -m sglang_emulator.nvidia_smi <args>``. Memory used reflects the emulated
servers running now (their records in the state dir). Supported: the plain summary, ``-L``,
``--query-gpu=<fields>`` and ``--query-compute-apps=<fields>`` with ``--format=csv[,noheader]
[,nounits]``, ``-i <indices>`` and ``topo -m``.
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from sglang_emulator.profile import Profile, ProfileError
from sglang_emulator.profile_loading import load_profile
from sglang_emulator.state import GpuProcess, StateDir, state_dir

__all__ = ["gpu_uuid", "main", "render_query_apps", "render_query_gpu", "render_summary", "render_topology"]

_WIDE = "+" + "-" * 89 + "+"
_SPLIT = "+-----------------------------------------+------------------------+----------------------+"

_TOPO_LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks"""


@dataclass(frozen=True)
class _Gpu:
    index: int
    uuid: str
    used_mib: int
    busy: bool


def gpu_uuid(profile: Profile, index: int) -> str:
    """The UUID of GPU ``index``: the profile's own, or one derived from the profile's name."""
    if index < len(profile.host.uuids):
        return profile.host.uuids[index]
    digest = hashlib.sha256(f"{profile.name}/{index}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _gpus(profile: Profile, processes: list[GpuProcess]) -> list[_Gpu]:
    gpus = []
    for index in range(profile.host.gpu_count):
        used = sum(p.memory_mib_by_gpu.get(index, 0) for p in processes)
        gpus.append(_Gpu(index, gpu_uuid(profile, index), used, used > 0))
    return gpus


def _fit(name: str, width: int) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def render_summary(profile: Profile, processes: list[GpuProcess], indices: list[int] | None = None) -> str:
    """The plain ``nvidia-smi`` table."""
    host = profile.host
    lines = [
        time.asctime() + "       ",
        _WIDE,
        f"| NVIDIA-SMI {host.driver_version:<23}Driver Version: {host.driver_version:<15}"
        f"CUDA Version: {host.cuda_version:<9}|",
        _SPLIT,
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|=========================================+========================+======================|",
    ]
    shown = [g for g in _gpus(profile, processes) if indices is None or g.index in indices]
    for gpu in shown:
        power = host.busy_power_w if gpu.busy else host.idle_power_w
        lines += [
            f"|{gpu.index:>4}  {_fit(host.gpu_name, 27):<27}{'On':>6}  |"
            f"{host.pci_bus_ids[gpu.index]:>19} {'Off':>3} |{host.ecc_errors:>21} |",
            f"| N/A  {host.temperature_c:>3}C    P0{power:>15}W / {round(host.power_limit_w):>4}W |"
            f"{gpu.used_mib:>8}MiB / {host.memory_total_mib:>6}MiB |{0:>7}%{'Default':>13} |",
            f"|{'':41}|{'':24}|{'Disabled':>21} |",
            _SPLIT,
        ]
    lines += [
        "",
        _WIDE,
        "| Processes:" + " " * 78 + "|",
        "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|" + "=" * 89 + "|",
    ]
    rows = [
        f"|{gpu:>5}   N/A  N/A{p.pid:>16}{'C':>7}   {_fit(p.process_name, 37):<37}{mem:>6}MiB |"
        for p in processes
        for gpu, mem in sorted(p.memory_mib_by_gpu.items())
        if indices is None or gpu in indices
    ]
    lines += rows or ["|  No running processes found" + " " * 61 + "|"]
    lines += [_WIDE, ""]
    return "\n".join(lines)


_GPU_FIELDS: dict[str, tuple[str, Callable[[Profile, _Gpu], str]]] = {
    "index": ("", lambda p, g: str(g.index)),
    "uuid": ("", lambda p, g: g.uuid),
    "gpu_uuid": ("", lambda p, g: g.uuid),
    "name": ("", lambda p, g: p.host.gpu_name),
    "gpu_name": ("", lambda p, g: p.host.gpu_name),
    "count": ("", lambda p, g: str(p.host.gpu_count)),
    "memory.total": ("MiB", lambda p, g: str(p.host.memory_total_mib)),
    "memory.used": ("MiB", lambda p, g: str(g.used_mib)),
    "memory.free": (
        "MiB",
        lambda p, g: str(max(p.host.memory_total_mib - p.host.memory_reserved_mib - g.used_mib, 0)),
    ),
    "memory.reserved": ("MiB", lambda p, g: str(p.host.memory_reserved_mib)),
    "compute_cap": ("", lambda p, g: p.host.compute_capability),
    "driver_version": ("", lambda p, g: p.host.driver_version),
    "pci.bus_id": ("", lambda p, g: p.host.pci_bus_ids[g.index]),
    "gpu_bus_id": ("", lambda p, g: p.host.pci_bus_ids[g.index]),
    "power.limit": ("W", lambda p, g: f"{p.host.power_limit_w:.2f}"),
    "power.draw": ("W", lambda p, g: f"{(p.host.busy_power_w if g.busy else p.host.idle_power_w):.2f}"),
    "temperature.gpu": ("", lambda p, g: str(p.host.temperature_c)),
    "utilization.gpu": ("%", lambda p, g: "0"),
    "persistence_mode": ("", lambda p, g: "Enabled"),
}

_APP_FIELDS: dict[str, tuple[str, str]] = {
    "pid": ("pid", ""),
    "process_name": ("process_name", ""),
    "name": ("process_name", ""),
    "used_memory": ("used_gpu_memory", "MiB"),
    "used_gpu_memory": ("used_gpu_memory", "MiB"),
    "gpu_uuid": ("gpu_uuid", ""),
    "gpu_bus_id": ("gpu_bus_id", ""),
    "gpu_name": ("gpu_name", ""),
}


class _UsageError(Exception):
    pass


def _csv(header: list[str], rows: list[list[str]], noheader: bool) -> str:
    lines = [] if noheader else [", ".join(header)]
    lines += [", ".join(r) for r in rows]
    return "".join(line + "\n" for line in lines)


def _header_name(field: str, unit: str) -> str:
    return f"{field} [{unit}]" if unit else field


def _with_unit(value: str, unit: str, nounits: bool) -> str:
    if nounits or not unit:
        return value
    return f"{value} %" if unit == "%" else f"{value} {unit}"


def render_query_gpu(
    profile: Profile,
    processes: list[GpuProcess],
    fields: list[str],
    noheader: bool,
    nounits: bool,
    indices: list[int] | None = None,
) -> str:
    """``--query-gpu=<fields> --format=csv[...]``."""
    for field in fields:
        if field not in _GPU_FIELDS:
            raise _UsageError(f'Field "{field}" is not a valid field to query.')
    rows = [
        [_with_unit(_GPU_FIELDS[f][1](profile, gpu), _GPU_FIELDS[f][0], nounits) for f in fields]
        for gpu in _gpus(profile, processes)
        if indices is None or gpu.index in indices
    ]
    return _csv([_header_name(f, _GPU_FIELDS[f][0]) for f in fields], rows, noheader)


def render_query_apps(
    profile: Profile, processes: list[GpuProcess], fields: list[str], noheader: bool, nounits: bool
) -> str:
    """``--query-compute-apps=<fields> --format=csv[...]``: one row per process and GPU."""
    for field in fields:
        if field not in _APP_FIELDS:
            raise _UsageError(f'Field "{field}" is not a valid field to query.')
    rows = []
    for process in processes:
        for gpu, mem in sorted(process.memory_mib_by_gpu.items()):
            values = {
                "pid": str(process.pid),
                "process_name": process.process_name,
                "used_gpu_memory": _with_unit(str(mem), "MiB", nounits),
                "gpu_uuid": gpu_uuid(profile, gpu),
                "gpu_bus_id": profile.host.pci_bus_ids[gpu],
                "gpu_name": profile.host.gpu_name,
            }
            rows.append([values[_APP_FIELDS[f][0]] for f in fields])
    header = [_header_name(_APP_FIELDS[f][0], _APP_FIELDS[f][1]) for f in fields]
    return _csv(header, rows, noheader)


def _link(profile: Profile, a: int, b: int) -> str:
    host = profile.host
    if a == b:
        return " X "
    if host.interconnect == "nvlink" and host.nvlinks_per_pair > 0:
        return f"NV{host.nvlinks_per_pair}"
    if host.pcie_switch_of_gpu[a] == host.pcie_switch_of_gpu[b]:
        return "PIX"
    if host.numa_node_of_gpu[a] == host.numa_node_of_gpu[b]:
        return "NODE"
    return "SYS"


def render_topology(profile: Profile) -> str:
    """``topo -m``: the link matrix, CPU and NUMA affinity, then the legend (ANSI header as real)."""
    count = profile.host.gpu_count
    names = [f"GPU{i}" for i in range(count)]
    header = "\t\x1b[4m" + "\t".join([*names, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]) + "\x1b[0m"
    lines = [header]
    for a in range(count):
        node = profile.host.numa_node_of_gpu[a]
        links = [_link(profile, a, b) for b in range(count)]
        lines.append("\t".join([names[a], *links, profile.host.cpu_affinity[node], str(node), "", "N/A"]))
    return "\n".join(lines) + "\n" + _TOPO_LEGEND + "\n"


def _parse_indices(value: str, count: int) -> list[int]:
    try:
        indices = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise _UsageError(
            f"Invalid GPU index {value!r}: use comma-separated indices 0..{count - 1}."
        ) from None
    for index in indices:
        if not 0 <= index < count:
            raise _UsageError("No devices were found" if count == 0 else f"GPU index {index} is not valid.")
    return indices


def run(argv: list[str], profile: Profile, state: StateDir) -> str:
    """The output of ``nvidia-smi <argv>``; ``_UsageError`` for what the shim does not support."""
    processes = state.live_processes()
    options: dict[str, str] = {}
    flags: set[str] = set()
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg.startswith("--") and "=" in arg:
            key, value = arg.split("=", 1)
            options[key] = value
        elif arg in ("-i", "--id", "--query-gpu", "--query-compute-apps", "--format") and args:
            options[{"-i": "--id"}.get(arg, arg)] = args.pop(0)
        else:
            flags.add(arg)
    indices = _parse_indices(options["--id"], profile.host.gpu_count) if "--id" in options else None
    if "topo" in flags:
        if "-m" not in flags and "--matrix" not in flags:
            raise _UsageError("The emulated nvidia-smi supports only `topo -m`.")
        return render_topology(profile)
    if "-L" in flags or "--list-gpus" in flags:
        return "".join(
            f"GPU {i}: {profile.host.gpu_name} (UUID: {gpu_uuid(profile, i)})\n"
            for i in range(profile.host.gpu_count)
            if indices is None or i in indices
        )
    query = options.get("--query-gpu") or options.get("--query-compute-apps")
    if query is not None:
        fmt = options.get("--format", "")
        parts = {p.strip() for p in fmt.split(",")}
        if "csv" not in parts:
            raise _UsageError('"--format" must be given as csv with --query-*, e.g. --format=csv,noheader.')
        fields = [f.strip() for f in query.split(",") if f.strip()]
        if "--query-gpu" in options:
            return render_query_gpu(
                profile, processes, fields, "noheader" in parts, "nounits" in parts, indices
            )
        return render_query_apps(profile, processes, fields, "noheader" in parts, "nounits" in parts)
    unknown = sorted(flags)
    if unknown:
        raise _UsageError(f"Invalid combination of input arguments: {' '.join(unknown)} is not emulated.")
    return render_summary(profile, processes, indices)


def main(argv: list[str] | None = None) -> int:
    """Print what ``nvidia-smi`` would; exit 2 on arguments it does not know, as the real tool does."""
    try:
        profile = load_profile()
    except ProfileError as exc:
        print(f"sglang-emulator nvidia-smi: {exc}", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(run(sys.argv[1:] if argv is None else argv, profile, state_dir()))
    except _UsageError as exc:
        print(exc)
        print("Please run 'nvidia-smi -h' for help.")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
