"""The hardware profile: the GPUs, the model and every number the emulator's models use.

Frozen dataclasses, one per part of the profile; ``profile_loading`` reads a JSON file into them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DraftModelSpec",
    "GpuHostSpec",
    "KvCellSpec",
    "MemorySpec",
    "ModelSpec",
    "NetworkSpec",
    "PerformanceSpec",
    "Profile",
    "ProfileError",
    "SpeculativeSpec",
    "StartupSpec",
]


class ProfileError(ValueError):
    """A profile file is missing, is not JSON, or has a key that is unknown, absent or mistyped."""


@dataclass(frozen=True)
class NetworkSpec:
    """The network between hosts, which a server over several nodes all-reduces across."""

    name: str = "unspecified 100 Gb/s Ethernet"
    bandwidth_gbit_s: float = 100.0
    """Per host, one direction."""
    latency_us: float = 25.0
    """One hop of a small NCCL message between two hosts."""


@dataclass(frozen=True)
class GpuHostSpec:
    """The GPUs as ``nvidia-smi`` reports them."""

    gpu_name: str
    gpu_count: int
    memory_total_mib: int
    memory_reserved_mib: int
    """Memory the driver keeps: ``memory.free`` is total minus used minus this."""
    compute_capability: str
    interconnect: str
    """``pcie`` or ``nvlink``."""
    driver_version: str
    cuda_version: str
    power_limit_w: float
    idle_power_w: int
    busy_power_w: int
    temperature_c: int
    pci_bus_ids: list[str]
    cpu_affinity: list[str]
    """Per NUMA node, the CPU list ``topo -m`` prints."""
    numa_node_of_gpu: list[int]
    pcie_switch_of_gpu: list[int]
    """GPUs on the same switch are ``PIX``, same NUMA node ``NODE``, otherwise ``SYS``."""
    nvlinks_per_pair: int
    ecc_errors: str
    """What the Volatile Uncorr. ECC column shows: ``0`` with ECC on, ``Off`` without."""
    uuids: list[str] = field(default_factory=list)
    """Explicit GPU UUIDs; generated from the profile name when empty."""
    network: NetworkSpec = field(default_factory=NetworkSpec)
    """The host's network to other hosts (multi-node servers)."""


@dataclass(frozen=True)
class KvCellSpec:
    """The attention shape that sizes a model's KV cache (``sglang_world.KvCell``)."""

    attention: str
    """``mha`` (a key and a value per KV head and layer, split over the GPUs) or ``mla`` (one
    latent per layer, on every GPU)."""
    layers: int
    kv_heads: int = 0
    """KV heads of the whole model (``mha``)."""
    head_dim: int = 0
    """Size of one key or value per head (``mha``)."""
    latent_dim: int = 0
    """``kv_lora_rank + qk_rope_head_dim`` (``mla``)."""


@dataclass(frozen=True)
class ModelSpec:
    """The served model."""

    name: str
    architecture: str
    model_type: str
    weights_gib_total: float
    """Weights over all tensor-parallel ranks; each rank holds ``weights_gib_total / tp``."""
    kv_cell: KvCellSpec
    context_length: int
    allreduces_per_forward: int
    """All-reduces in one target forward pass at tp > 1 (two per layer)."""
    vocab_size: int
    hidden_size: int = 4096
    """Width of the hidden state each all-reduce sums, per token (bf16: two bytes each)."""
    vision_tower: list[int] = field(default_factory=list)
    """A multimodal model's vision tower: ``[layers, hidden_size]``; empty for text only."""
    config: str = ""
    """The public model whose ``config.json`` facts the release's own code is run with at start
    (``sglang_world.models``: ``kimi-k2.5``); empty: none, the project's rules resolve the settings."""


@dataclass(frozen=True)
class DraftModelSpec:
    """The EAGLE draft model's footprint."""

    weights_gib_total: float
    kv_cell: KvCellSpec
    allreduces_per_forward: int


@dataclass(frozen=True)
class MemorySpec:
    """What the model takes of each GPU besides its weights and KV cache: physical facts only
    (what SGLang decides from them is ``sglang_world``'s)."""

    runtime_overhead_gib: float
    """CUDA context, cuBLAS and NCCL, gone before SGLang first measures free memory."""
    runtime_overhead_source: str
    """Where ``runtime_overhead_gib`` and the host's driver reserve come from: a measurement of this
    GPU model with its source, or what was assumed or back-computed instead (the plan says it)."""
    cuda_graph_mib_per_graph: float
    """Target-model CUDA graphs, per captured decode batch size."""
    draft_cuda_graph_mib_per_graph: float
    """Draft and draft-extend CUDA graphs, per captured decode batch size."""
    activation_mib_per_prefill_token: float
    """Activation memory a prefill forward takes per token."""
    ep_a2a_workspace_gib: float
    """What the expert-parallel all-to-all workspace takes before it fails."""


@dataclass(frozen=True)
class SpeculativeSpec:
    """EAGLE timing and acceptance."""

    default_num_steps: int
    default_eagle_topk: int
    default_num_draft_tokens: int
    verify_forward_ms: float
    """One verify pass of the target model at batch 1, NCCL all-reduces included."""
    draft_forward_ms: float
    extra_request_verify_ms: float
    draft_token_accept_rate: float
    """Chance that each successive drafted token is accepted."""


@dataclass(frozen=True)
class PerformanceSpec:
    """Decode timing: one forward pass = compute + graph overhead + all-reduces + batch cost."""

    decode_compute_ms: float
    """One decode forward at batch 1 without all-reduces or graph overhead."""
    captured_graph_overhead_ms: float
    """Added to each target forward per captured CUDA graph (bs 512 ran slower than bs 128)."""
    nccl_allreduce_us: float
    custom_allreduce_pcie_us: float
    """The custom all-reduce kernel when it runs over PCIe (not disabled, tp > 1)."""
    eager_forward_penalty_ms: float
    """Added to a forward that runs without a CUDA graph."""
    extra_request_ms: float
    """Added to a decode forward for each request in the batch beyond the first."""
    prefill_base_ms: float
    prefill_ms_per_token: float
    decode_log_interval: int
    speculative: SpeculativeSpec


@dataclass(frozen=True)
class StartupSpec:
    """Startup durations in seconds at time scale 1.0."""

    process_start_s: float
    init_distributed_s: float
    weight_load_gib_per_s: float
    draft_load_s: float
    kv_cache_alloc_s: float
    cuda_graph_s_per_graph: float
    draft_cuda_graph_s_per_graph: float
    http_start_s: float
    warmup_s: float


@dataclass(frozen=True)
class Profile:
    """One host and model: what ``nvidia-smi`` shows and how the server behaves on it."""

    name: str
    description: str
    sglang_release: str
    random_seed: int
    host: GpuHostSpec
    model: ModelSpec
    draft_model: DraftModelSpec
    memory: MemorySpec
    performance: PerformanceSpec
    startup: StartupSpec
    faults: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    """Where the profile was read from (set by the loader)."""
