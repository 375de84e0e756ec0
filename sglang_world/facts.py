"""What a memory plan is made of: the launch flags that matter, the model, and the GPU.

``Launch`` is what the command line says (None: the release chooses). ``ModelFacts`` and
``DeviceFacts`` are physical facts of the model on one GPU and of the GPU itself; the emulator's
profile holds them for its host, a stack declares them for a real one. Memory is MiB unless a
name says otherwise; GiB is what SGLang prints as ``GB`` (2^30 bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_world.kv import KvCell

__all__ = [
    "DEFAULT_DRIVER_RESERVED_MIB",
    "DEFAULT_RUNTIME_MIB",
    "DeviceFacts",
    "DraftFacts",
    "Launch",
    "ModelFacts",
    "Workload",
    "memory_source",
]

DEFAULT_DRIVER_RESERVED_MIB = 616
"""What the driver keeps of nvidia-smi's total, measured on an H200 (driver 580): 143,771 MiB total,
143,155 MiB for CUDA."""
DEFAULT_RUNTIME_MIB = 1359
"""Gone before SGLang first measures free memory, measured on one H200: CUDA context 527 MiB,
cuBLAS 164 MiB, NCCL init and one all-reduce 668 MiB (world size 1)."""
MEASURED_ON = "NVIDIA H200"
"""The GPU model whose driver reserve and runtime memory were measured (the defaults above)."""
MEASUREMENT = (
    "measured on one NVIDIA H200 (driver 580, torch 2.11 + CUDA 13.0, NCCL 2.28.9, one process: "
    "CUDA context 527 MiB, cuBLAS 164 MiB, NCCL 668 MiB)"
)


def memory_source(gpu_model: str) -> str:
    """Where the defaults' driver reserve and runtime memory come from, for a GPU of ``gpu_model``
    (as nvidia-smi names it): the H200's measurement, or that measurement assumed for another GPU."""
    if MEASURED_ON in gpu_model:
        return MEASUREMENT
    return f"assumed: no measurement of the {gpu_model} is on record, so one H200's is used ({MEASUREMENT})"


@dataclass(frozen=True)
class Launch:
    """The launch flags that decide memory; None leaves the choice to the release."""

    tp_size: int = 1
    pp_size: int = 1
    attn_dp_size: int = 1
    """Attention data parallelism (``--enable-dp-attention --dp-size N``, ``--attn-dp-size N``); 1 is off."""
    mem_fraction_static: float | None = None
    chunked_prefill_size: int | None = None
    """Tokens per prefill chunk; -1 turns chunking off."""
    max_prefill_tokens: int | None = None
    cuda_graph_max_bs: int | None = None
    cuda_graph_bs: tuple[int, ...] | None = None
    cuda_graph_disabled: bool = False
    disable_cuda_graph_padding: bool = False
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    page_size: int | None = None
    context_length: int | None = None
    kv_cache_dtype: str = "auto"
    speculative_algorithm: str | None = None
    """``EAGLE``, ``EAGLE3``, ``STANDALONE``, ``NGRAM`` (``NEXTN`` is EAGLE)."""
    speculative_num_draft_tokens: int | None = None
    enable_piecewise_cuda_graph: bool = False
    moe_a2a_backend: str = "none"
    """The MoE all-to-all backend (``none`` unless expert parallelism uses one)."""
    disaggregation_mode: str = "null"
    """``null``, ``prefill`` or ``decode``."""
    environment: tuple[tuple[str, str], ...] = ()
    """The server's environment variables that change memory settings (sorted pairs)."""

    @property
    def speculative(self) -> str | None:
        """The algorithm as the release names it after parsing (``NEXTN`` is ``EAGLE``)."""
        return "EAGLE" if self.speculative_algorithm == "NEXTN" else self.speculative_algorithm

    @property
    def has_draft_model(self) -> bool:
        """Whether a draft model is loaded (NGRAM drafts from the prompt, with no model)."""
        return self.speculative in ("EAGLE", "EAGLE3", "STANDALONE")


@dataclass(frozen=True)
class DraftFacts:
    """A speculative-decoding draft model on one GPU."""

    weights_gib: float
    """Draft weights each GPU holds."""
    kv: KvCell | None = None
    """The draft's own KV cell; None when unknown."""
    cuda_graph_mib_per_size: float = 0.0
    """Draft and draft-extend CUDA graphs, per captured batch size."""


@dataclass(frozen=True)
class ModelFacts:
    """The served model as one GPU sees it."""

    weights_gib: float
    """Weights each GPU holds (``Load weight end ... mem usage``)."""
    kv: KvCell | None = None
    """The KV cell; None when unknown (then the pool's size in tokens is unknown)."""
    context_length: int | None = None
    """``max_position_embeddings``; None when unknown."""
    vision: tuple[int, int] | None = None
    """Vision tower layers and hidden size of a multimodal model; None for text only."""
    cuda_graph_mib_per_size: float | None = None
    """CUDA-graph memory per captured batch size; None when unknown."""
    activation_mib_per_token: float | None = None
    """Activation memory a prefill forward needs per token; None when unknown."""
    draft: DraftFacts | None = None
    """The draft model when the server speculates with one."""

    @property
    def mla(self) -> bool:
        """Whether attention is multi-head latent (decides some of the release's settings)."""
        return self.kv is not None and self.kv.attention == "mla"


@dataclass(frozen=True)
class DeviceFacts:
    """One GPU and what is gone from it before SGLang loads anything."""

    total_mib: int
    """``memory.total`` as nvidia-smi prints it: what the release's own settings read."""
    driver_reserved_mib: float = DEFAULT_DRIVER_RESERVED_MIB
    """What the driver keeps: CUDA sees the total minus this."""
    runtime_mib: float = DEFAULT_RUNTIME_MIB
    """CUDA context, cuBLAS and NCCL, gone before SGLang measures free memory."""
    memory_source: str = MEASUREMENT
    """Where ``driver_reserved_mib`` and ``runtime_mib`` come from, in words: a measurement of this GPU
    model with its source, or what was assumed instead."""
    others_mib: float = 0.0
    """What other processes hold on the GPU."""


@dataclass(frozen=True)
class Workload:
    """What the server will be asked: prompts of ``input_len`` tokens, ``output_len`` new tokens."""

    input_len: int
    output_len: int
    concurrency: int = 1
