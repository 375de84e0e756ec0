"""The per-GPU memory planner: does a configuration fit, and what mem fraction would make it fit.

SGLang splits each GPU in two. The static pool (total x ``mem_fraction_static``) holds the target
and draft weights and the KV cache; the rest holds CUDA graphs, activations and the draft
model's graphs and buffers. Sizes are GB as SGLang prints them (2^30 bytes).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from sglang_stacks.config.flags import SpeculativeAlgorithm
    from sglang_stacks.config.spec import StackSpec

__all__ = [
    "MIN_KV_CACHE_GB",
    "MemoryInputs",
    "MemoryPlan",
    "auto_mem_fraction",
    "memory_inputs",
    "plan_memory",
]

MIN_KV_CACHE_GB = 1.0
"""Smallest KV cache counted as fitting: below it SGLang fails with "Not enough memory", or
serves a pool of a few thousand tokens of a large model."""

# SGLang's own estimate of the draft model's graphs and buffers, reserved outside the static pool.
_DRAFT_RESERVE_GB = {"EAGLE": 2.0, "EAGLE3": 2.0, "NEXTN": 2.0, "STANDALONE": 6.0, "NGRAM": 0.0}
# SGLang reserves 2 MiB of CUDA-graph memory per captured decode batch size.
_GRAPH_GB_PER_BATCH = 2 / 1024
# SGLang's heuristic reserves 1.5 MiB per chunked-prefill token and says itself it is rough; the
# campaign's EAGLE-3 run at 0.88 worked with 11.5 GB outside the pool, so a third of it is used.
_ACTIVATION_GB_PER_PREFILL_TOKEN = 0.5 / 1024
_METADATA_GB = 0.5
# Releases whose automatic mem fraction this module reproduces (see auto_mem_fraction).
_AUTO_FRACTION_RELEASES = frozenset({"0.5.8"})


@dataclass(frozen=True)
class MemoryInputs:
    """What the planner needs, whether it comes from a stack spec or is given directly."""

    release: str
    """SGLang release; decides whether the automatic fraction is known."""
    total_mib: int
    """Memory of one GPU, as ``nvidia-smi`` prints ``memory.total``."""
    target_weights_gb: float
    """Target-model weights on each GPU."""
    draft_weights_gb: float = 0.0
    """Draft-model weights on each GPU."""
    tp_size: int = 1
    """Tensor-parallel size."""
    mem_fraction_static: float | None = None
    """The stack's fraction; None lets the release choose."""
    cuda_graph_max_bs: int | None = None
    """Largest captured decode batch; None means the release's default."""
    cuda_graph_disabled: bool = False
    """Whether the server runs without CUDA graphs."""
    chunked_prefill_size: int | None = None
    """Prefill chunk in tokens; None means the release's default."""
    speculative_algorithm: SpeculativeAlgorithm | None = None
    """Speculative algorithm, which decides the draft reserve."""
    vision_num_layers: int | None = None
    """Vision-tower layers of a multimodal model."""
    vision_hidden_size: int | None = None
    """Vision-tower hidden size of a multimodal model."""


@dataclass(frozen=True)
class MemoryPlan:
    """The per-GPU budget of one configuration and the verdict on it."""

    total_gb: float
    """Memory of one GPU."""
    mem_fraction_static: float | None
    """The fraction in effect: the stack's, the release's automatic one, or None when unknown."""
    fraction_source: Literal["set", "auto", "unknown"]
    """Where the fraction comes from."""
    target_weights_gb: float
    """Target-model weights on each GPU."""
    draft_weights_gb: float
    """Draft-model weights on each GPU."""
    cuda_graph_max_bs: int
    """Largest captured decode batch (the release's default when unset; 0 without CUDA graphs)."""
    cuda_graphs_gb: float
    """Estimated CUDA-graph memory, growing with ``cuda_graph_max_bs``."""
    activations_gb: float
    """Estimated activation and metadata memory for prefill chunks."""
    draft_reserve_gb: float
    """SGLang's own reserve for the draft model's graphs and buffers (about 2 GB for EAGLE)."""
    smallest_fitting_fraction: float | None
    """Smallest fraction (2 decimals) that leaves ``MIN_KV_CACHE_GB`` of KV cache; None if none."""
    largest_fitting_fraction: float | None
    """Largest fraction (2 decimals) that leaves room for graphs and activations; None if none."""

    @property
    def static_pool_gb(self) -> float | None:
        """Total x fraction: weights plus KV cache."""
        if self.mem_fraction_static is None:
            return None
        return self.total_gb * self.mem_fraction_static

    @property
    def kv_cache_gb(self) -> float | None:
        """What the static pool leaves for the KV cache after the weights (negative: does not fit)."""
        pool = self.static_pool_gb
        return None if pool is None else pool - self.target_weights_gb - self.draft_weights_gb

    @property
    def rest_gb(self) -> float | None:
        """Memory outside the static pool."""
        pool = self.static_pool_gb
        return None if pool is None else self.total_gb - pool

    @property
    def rest_needed_gb(self) -> float:
        """What graphs, activations and the draft reserve need outside the static pool."""
        return self.cuda_graphs_gb + self.activations_gb + self.draft_reserve_gb

    @property
    def verdict(self) -> Literal["fits", "does_not_fit", "unknown"]:
        """``fits`` when the KV cache and the rest both have room."""
        kv, rest = self.kv_cache_gb, self.rest_gb
        if kv is None or rest is None:
            return "unknown"
        if kv >= MIN_KV_CACHE_GB and rest >= self.rest_needed_gb:
            return "fits"
        return "does_not_fit"

    @property
    def fits(self) -> bool:
        """Whether the verdict is ``fits``."""
        return self.verdict == "fits"

    def as_dict(self) -> dict[str, object]:
        """Every figure of the plan, derived ones included, for JSON and stack outputs."""
        derived = ("static_pool_gb", "kv_cache_gb", "rest_gb", "rest_needed_gb", "verdict")
        figures = {**asdict(self), **{name: getattr(self, name) for name in derived}}
        # Shown to people: four decimals say everything a GB or a fraction needs to.
        return {
            name: round(value, 4) if isinstance(value, float) else value for name, value in figures.items()
        }

    def explain(self) -> list[str]:
        """The plan as sentences a user reads before launching."""
        lines = [f"GPU memory: {self.total_gb:.2f} GB per GPU."]
        weights = f"target weights {self.target_weights_gb:.2f} GB"
        if self.draft_weights_gb:
            weights += f" + draft weights {self.draft_weights_gb:.2f} GB"
        pool, kv, rest = self.static_pool_gb, self.kv_cache_gb, self.rest_gb
        if pool is None or kv is None or rest is None:
            lines.append(
                "mem_fraction_static is unset and this release's automatic choice is unknown here, "
                f"so the plan cannot be judged; {weights} need a fraction of at least "
                f"{_fraction_text(self.smallest_fitting_fraction)}."
            )
            return lines
        source = {"set": "set in the stack", "auto": "chosen by SGLang automatically", "unknown": ""}
        fraction = f"mem_fraction_static {self.mem_fraction_static:.3g} ({source[self.fraction_source]})"
        lines.append(f"Static pool: {pool:.2f} GB at {fraction} = {weights} + KV cache {kv:.2f} GB.")
        lines.append(
            f"Outside the pool: {rest:.2f} GB for CUDA graphs (max bs {self.cuda_graph_max_bs}: "
            f"{self.cuda_graphs_gb:.2f} GB), activations ({self.activations_gb:.2f} GB) and the draft "
            f"reserve ({self.draft_reserve_gb:.2f} GB): {self.rest_needed_gb:.2f} GB needed."
        )
        if self.verdict == "fits":
            lines.append(f"Verdict: fits at {fraction}, with {kv:.2f} GB of KV cache.")
        elif kv < MIN_KV_CACHE_GB:
            lines.append(
                f"Verdict: does not fit at {fraction}: {weights} leave {kv:.2f} GB of KV cache (at least "
                f"{MIN_KV_CACHE_GB:.1f} GB needed); SGLang stops with out of memory. The smallest "
                f"fraction that fits is {_fraction_text(self.smallest_fitting_fraction)}."
            )
        else:
            lines.append(
                f"Verdict: does not fit at {fraction}: {rest:.2f} GB outside the pool is less than the "
                f"{self.rest_needed_gb:.2f} GB graphs and activations need; CUDA-graph capture runs out "
                f"of memory. The largest fraction that fits is "
                f"{_fraction_text(self.largest_fitting_fraction)}, or lower cuda_graph_max_bs."
            )
        return lines


def _fraction_text(fraction: float | None) -> str:
    return "none below 1.0" if fraction is None else f"{fraction:.2f}"


def _default_cuda_graph_max_bs(total_mib: int, tp_size: int) -> int:
    # SGLang 0.5.8 picks the captured batch size from the GPU's memory and the TP size.
    gib = total_mib / 1024
    if gib < 20:
        return 8
    if gib < 35:
        return 24 if tp_size < 4 else 80
    if gib < 60:
        return 32 if tp_size < 4 else 160
    if gib < 160:
        return 256 if tp_size < 4 else 512
    return 512


def _default_chunked_prefill_size(total_mib: int) -> int:
    gib = total_mib / 1024
    if gib < 35:
        return 2048
    if gib < 60:
        return 4096
    if gib < 160:
        return 8192
    return 16384


def auto_mem_fraction(inputs: MemoryInputs) -> float | None:
    """The ``mem_fraction_static`` the release picks when the stack leaves it unset, or None.

    Reproduces SGLang 0.5.8's heuristic: reserve 0.5 GB, 1.5 MiB per chunked-prefill token,
    2 MiB per captured batch size and 1 GB per 8 TP ranks (at least 10 GB on GPUs over 60 GB),
    plus 2 GB for an EAGLE draft (6 GB for STANDALONE); round (total - reserve) / total to 3
    decimals; multimodal models then scale it down by the size of their vision tower. On the
    campaign's host (97887 MiB, TP 8, max bs 128, EAGLE, Kimi-K2.5's 27 x 1152 vision tower) this
    gives 0.76, the fraction that ran out of memory. Other releases decide differently: None.
    """
    if inputs.release not in _AUTO_FRACTION_RELEASES:
        return None
    total = inputs.total_mib
    prefill = inputs.chunked_prefill_size or _default_chunked_prefill_size(total)
    graph_bs = inputs.cuda_graph_max_bs or _default_cuda_graph_max_bs(total, inputs.tp_size)
    reserve_mib = 512 + max(prefill if prefill > 0 else 16384, 2048) * 1.5
    reserve_mib += graph_bs * 2 + inputs.tp_size / 8 * 1024
    if total > 60 * 1024:
        reserve_mib = max(reserve_mib, 10 * 1024)
    reserve_mib += _DRAFT_RESERVE_GB.get(inputs.speculative_algorithm or "", 0.0) * 1024
    fraction = round((total - reserve_mib) / total, 3)
    if inputs.vision_num_layers is not None and inputs.vision_hidden_size is not None:
        # A vision tower larger than ViT-L/14 (24 x 1024) lowers the fraction further.
        ratio = inputs.vision_num_layers * inputs.vision_hidden_size**2 / (24 * 1024**2)
        fraction *= 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))
    return fraction


def memory_inputs(spec: StackSpec, release: str | None = None) -> MemoryInputs:
    """The planner's inputs for a stack, for ``release`` (default: the stack's SGLang release)."""
    server = spec.server
    tp_size = spec.tp_size
    draft_gb = (
        spec.draft_model.weights_gb / tp_size if spec.draft_model and server.speculative_algorithm else 0
    )
    return MemoryInputs(
        release=release or spec.environment.sglang_release,
        total_mib=spec.host.memory_per_gpu_mib,
        target_weights_gb=spec.model.weights_gb_per_gpu(tp_size),
        draft_weights_gb=draft_gb,
        tp_size=tp_size,
        mem_fraction_static=server.mem_fraction_static,
        cuda_graph_max_bs=server.cuda_graph_max_bs,
        cuda_graph_disabled=server.disable_cuda_graph,
        chunked_prefill_size=server.chunked_prefill_size,
        speculative_algorithm=server.speculative_algorithm,
        vision_num_layers=spec.model.vision_num_layers,
        vision_hidden_size=spec.model.vision_hidden_size,
    )


def plan_memory(source: StackSpec | MemoryInputs, release: str | None = None) -> MemoryPlan:
    """Plan one GPU's memory for a stack spec (for ``release``) or for explicit inputs."""
    inputs = source if isinstance(source, MemoryInputs) else memory_inputs(source, release)
    total_gb = inputs.total_mib / 1024
    fraction: float | None = inputs.mem_fraction_static
    fraction_source: Literal["set", "auto", "unknown"] = "set"
    if fraction is None:
        fraction = auto_mem_fraction(inputs)
        fraction_source = "unknown" if fraction is None else "auto"
    graph_bs = 0
    if not inputs.cuda_graph_disabled:
        graph_bs = inputs.cuda_graph_max_bs or _default_cuda_graph_max_bs(inputs.total_mib, inputs.tp_size)
    prefill = inputs.chunked_prefill_size or _default_chunked_prefill_size(inputs.total_mib)
    activations_gb = _METADATA_GB + inputs.tp_size / 8 + max(prefill, 2048) * _ACTIVATION_GB_PER_PREFILL_TOKEN
    draft_reserve_gb = _DRAFT_RESERVE_GB.get(inputs.speculative_algorithm or "", 0.0)
    cuda_graphs_gb = graph_bs * _GRAPH_GB_PER_BATCH
    weights_gb = inputs.target_weights_gb + inputs.draft_weights_gb
    smallest = math.ceil((weights_gb + MIN_KV_CACHE_GB) / total_gb * 100) / 100
    largest = math.floor((1 - (cuda_graphs_gb + activations_gb + draft_reserve_gb) / total_gb) * 100) / 100
    return MemoryPlan(
        total_gb=total_gb,
        mem_fraction_static=fraction,
        fraction_source=fraction_source,
        target_weights_gb=inputs.target_weights_gb,
        draft_weights_gb=inputs.draft_weights_gb,
        cuda_graph_max_bs=graph_bs,
        cuda_graphs_gb=cuda_graphs_gb,
        activations_gb=activations_gb,
        draft_reserve_gb=draft_reserve_gb,
        smallest_fitting_fraction=smallest if smallest <= largest and smallest < 1 else None,
        largest_fitting_fraction=largest if smallest <= largest and largest > 0 else None,
    )
