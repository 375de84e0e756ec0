"""A GPU host's facts as typed values: what a stack declares about its host, and what the probe
found there (the host probe's output and the stack's ``host`` output)."""

from __future__ import annotations

from pydantic import ConfigDict

from sglang_stacks.hostops.nvidia_smi import HostFacts
from sglang_stacks.shape import Shape

__all__ = ["FACT_KEYS", "DeclaredFacts", "FoundFacts"]


class DeclaredFacts(Shape):
    """The facts a stack declares about its host; all are stable across probes."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    gpu_model: str
    """The GPU's name as nvidia-smi prints it (``NVIDIA H200``)."""
    gpu_count: int
    """How many GPUs the host has."""
    memory_per_gpu_mib: int
    """Total memory of each GPU."""
    compute_capability: str
    """CUDA compute capability, ``"9.0"`` for SM90."""
    interconnect: str
    """``pcie``, ``nvlink`` or ``single``."""


FACT_KEYS = tuple(DeclaredFacts.model_fields)
"""The facts a stack declares and the probe checks."""


class FoundFacts(DeclaredFacts):
    """The facts the probe found: the declared ones and the driver version."""

    driver_version: str
    """The NVIDIA driver version."""

    @classmethod
    def of(cls, found: HostFacts) -> FoundFacts:
        """The facts of a probe's findings."""
        return cls.model_validate(found.summary())
