"""The per-GPU memory plan: weights, draft, KV pool and CUDA graphs against the static fraction.

Mirrors how SGLang sizes its KV pool: the static pool is ``mem_fraction_static`` of the GPU,
what the weights (and any other process) already took is subtracted, and the rest holds KV.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_emulator.launch import LaunchConfig
from sglang_emulator.profile import Profile

__all__ = ["MemoryPlan", "auto_mem_fraction_static", "plan_memory"]

_GIB = 1024**3


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory, in GiB unless named otherwise."""

    total_gib: float
    mem_fraction_static: float
    avail_before_load_gib: float
    runtime_overhead_gib: float
    weights_gib: float
    draft_weights_gib: float
    kv_pool_gib: float
    kv_bytes_per_token: int
    max_total_num_tokens: int
    cuda_graph_gib: float
    draft_cuda_graph_gib: float
    max_running_requests: int

    @property
    def weights_fit(self) -> bool:
        """Whether the weights (and draft) load at all into what is free."""
        return (
            self.runtime_overhead_gib + self.weights_gib + self.draft_weights_gib
            <= self.avail_before_load_gib
        )

    @property
    def kv_fits(self) -> bool:
        """SGLang's "Not enough memory" check: a KV pool of at least one token."""
        return self.max_total_num_tokens > 0

    @property
    def avail_after_load_gib(self) -> float:
        return (
            self.avail_before_load_gib - self.runtime_overhead_gib - self.weights_gib - self.draft_weights_gib
        )

    @property
    def avail_after_pool_gib(self) -> float:
        return self.avail_after_load_gib - max(self.kv_pool_gib, 0.0)

    def used_mib(self, phase: str) -> int:
        """What ``nvidia-smi`` shows this process using once ``phase`` is reached."""
        used = self.runtime_overhead_gib
        if phase in ("weights", "kv", "graphs", "ready"):
            used += self.weights_gib + self.draft_weights_gib
        if phase in ("kv", "graphs", "ready"):
            used += max(self.kv_pool_gib, 0.0)
        if phase in ("graphs", "ready"):
            used += self.cuda_graph_gib + self.draft_cuda_graph_gib
        return round(used * 1024)


def auto_mem_fraction_static(config: LaunchConfig, profile: Profile) -> float:
    """The fraction SGLang picks when ``--mem-fraction-static`` is unset (0.76 for EAGLE bs 128 here)."""
    rule = profile.memory.auto_mem_fraction
    total_mib = profile.host.memory_total_mib
    reserved = rule.reserved_mib_base + rule.reserved_mib_per_cuda_graph_bs * config.cuda_graph_max_bs
    if config.speculative is not None:
        reserved += rule.reserved_mib_speculative
    return round((total_mib - reserved) / total_mib, 3)


def plan_memory(config: LaunchConfig, profile: Profile, used_by_others_mib: int = 0) -> MemoryPlan:
    """The plan for one GPU; ``used_by_others_mib`` is memory other processes hold there."""
    total_gib = profile.host.memory_total_mib / 1024
    fraction = config.mem_fraction_static or auto_mem_fraction_static(config, profile)
    avail = (profile.host.memory_total_mib - profile.host.memory_reserved_mib - used_by_others_mib) / 1024
    spec = config.speculative is not None
    weights = profile.model.weights_gib_total / config.tp_size
    draft = profile.draft_model.weights_gib_total / config.tp_size if spec else 0.0
    used_after_load = (total_gib - avail) + profile.memory.runtime_overhead_gib + weights + draft
    kv_pool = total_gib * fraction - used_after_load
    per_token = profile.model.kv_cache_bytes_per_token
    if spec:
        per_token += profile.draft_model.kv_cache_bytes_per_token
    tokens = int(kv_pool * _GIB // per_token) if kv_pool > 0 else 0
    graphs = 0 if config.cuda_graph_disabled else len(config.cuda_graph_bs)
    max_running = config.max_running_requests or min(
        max(tokens // 2, 1), profile.memory.max_running_requests_cap
    )
    return MemoryPlan(
        total_gib=total_gib,
        mem_fraction_static=fraction,
        avail_before_load_gib=avail,
        runtime_overhead_gib=profile.memory.runtime_overhead_gib,
        weights_gib=weights,
        draft_weights_gib=draft,
        kv_pool_gib=kv_pool,
        kv_bytes_per_token=per_token,
        max_total_num_tokens=tokens,
        cuda_graph_gib=graphs * profile.memory.cuda_graph_mib_per_graph / 1024,
        draft_cuda_graph_gib=(graphs * profile.memory.draft_cuda_graph_mib_per_graph / 1024) if spec else 0.0,
        max_running_requests=max_running,
    )
