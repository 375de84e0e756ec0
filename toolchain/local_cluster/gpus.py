"""What the node shows of its GPUs, from an emulator profile: the extended resource a device plugin
advertises (``nvidia.com/gpu``) and the labels NVIDIA's GPU feature discovery publishes (and the GPU
operator's ``nvidia.com/gpu.present``), with the values it would derive from the profile's GPUs
(what ``nvidia-smi`` shows: name, count, memory, compute capability, driver and CUDA versions)."""

from __future__ import annotations

import re

from sglang_emulator.profile import GpuHostSpec

GPU_RESOURCE = "nvidia.com/gpu"
# GPU feature discovery's family of each CUDA compute capability major version.
_FAMILIES = {
    1: "tesla",
    2: "fermi",
    3: "kepler",
    5: "maxwell",
    6: "pascal",
    8: "ampere",
    9: "hopper",
    10: "blackwell",
    12: "blackwell",
    13: "rubin",
}


def family(major: int, minor: int) -> str:
    """The architecture family GPU feature discovery names for a compute capability."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8 and minor >= 9:
        return "ada-lovelace"
    return _FAMILIES.get(major, "undefined")


def product(gpu_name: str) -> str:
    """The GPU's name as a label value: what GPU feature discovery keeps of it, blanks as dashes."""
    return "-".join(re.sub(r"[^A-Za-z0-9-_. ]", "", gpu_name).split())


def gpu_labels(host: GpuHostSpec) -> dict[str, str]:
    """GPU feature discovery's labels for the profile's GPUs (the deprecated and current names of
    the version labels both, as it publishes them)."""
    major, minor = (int(part) for part in host.compute_capability.split("."))
    driver = host.driver_version.split(".")
    cuda_major, cuda_minor = host.cuda_version.split(".")[:2]
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product(host.gpu_name),
        "nvidia.com/gpu.count": str(host.gpu_count),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.memory": str(host.memory_total_mib),
        "nvidia.com/gpu.family": family(major, minor),
        "nvidia.com/gpu.compute.major": str(major),
        "nvidia.com/gpu.compute.minor": str(minor),
        "nvidia.com/cuda.driver.major": driver[0],
        "nvidia.com/cuda.driver.minor": driver[1],
        "nvidia.com/cuda.driver.rev": driver[2] if len(driver) > 2 else "",
        "nvidia.com/cuda.driver-version.major": driver[0],
        "nvidia.com/cuda.driver-version.minor": driver[1],
        "nvidia.com/cuda.driver-version.revision": driver[2] if len(driver) > 2 else "",
        "nvidia.com/cuda.driver-version.full": host.driver_version,
        "nvidia.com/cuda.runtime.major": cuda_major,
        "nvidia.com/cuda.runtime.minor": cuda_minor,
        "nvidia.com/cuda.runtime-version.major": cuda_major,
        "nvidia.com/cuda.runtime-version.minor": cuda_minor,
        "nvidia.com/cuda.runtime-version.full": f"{cuda_major}.{cuda_minor}",
    }
    return labels
