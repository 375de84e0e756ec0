"""The shapes of a release's memory rules: GPU-size defaults, captured batch sizes, the reserve.

A ``Rules`` value holds what one release decides about memory from its flags and the GPU;
``releases.py`` says which rules each shipped release follows and ``settings.py`` applies them.
Every number is a parameter of the project's own implementation, checked against what each
release's own code resolves over the recorded grid (``tests/test_world_releases.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "INF",
    "CaptureRule",
    "GpuTier",
    "PiecewiseRule",
    "ReserveRule",
    "Rules",
    "RuntimeCapture",
    "Segment",
]

INF = math.inf

Segment = tuple[int, int | None, int]
"""A run of batch sizes, ``range(start, stop, step)``; a stop of None runs to the largest size."""


def _expand(segments: tuple[Segment, ...], largest: int) -> list[int]:
    sizes: list[int] = []
    for start, stop, step in segments:
        sizes += range(start, largest + 1 if stop is None else stop, step)
    return [size for size in sizes if size <= largest]


@dataclass(frozen=True)
class GpuTier:
    """Defaults on GPUs below ``below_gib`` of nvidia-smi's total (the first tier that holds wins)."""

    below_gib: float
    chunked_prefill_size: int
    cuda_graph_max_bs: int | None
    """CUDA-graph max batch size below ``Rules.large_tp``; None leaves it to the runtime."""
    cuda_graph_max_bs_large_tp: int | None
    """CUDA-graph max batch size at ``Rules.large_tp`` GPUs or more."""
    reserve_gib: float = 0.0
    """Releases that reserve per tier (``Rules.reserve_by_tier``): the fixed part."""
    reserve_gib_per_rank: float = 0.0
    """... and what each tensor- or pipeline-parallel rank adds."""


@dataclass(frozen=True)
class CaptureRule:
    """The decode batch sizes the release captures CUDA graphs for."""

    plain: tuple[Segment, ...]
    speculative: tuple[Segment, ...]
    append_max: bool = True
    """Whether the max batch size itself is captured when no segment reaches it."""

    def sizes(self, max_bs: int, speculating: bool, no_padding: bool) -> list[int]:
        """The captured sizes up to ``max_bs``, ascending."""
        if no_padding:
            return list(range(1, max_bs + 1))
        chosen = _expand(self.speculative if speculating else self.plain, max_bs)
        if self.append_max and max_bs not in chosen:
            chosen.append(max_bs)
        return chosen


@dataclass(frozen=True)
class PiecewiseRule:
    """Prefill ("piecewise") CUDA graphs: the token counts captured and what the reserve keeps."""

    segments: tuple[Segment, ...]
    reserve: Literal["quarter_of_max", "eighth_of_max", "per_size"]
    """What the reserve adds: max tokens / 4 or / 8 MiB, or 8 MiB per captured size."""
    on_by_default: bool = False
    mla_max_tokens: int | None = None
    """MLA models capture up to this many tokens (None: the chunked prefill size)."""
    mla_reserve_mib: float | None = None
    """MLA models reserve this instead of the per-size amount."""
    capped_by_context: bool = False
    """The largest captured size never exceeds ``--context-length``."""
    mla_capped_by_chunk: bool = False
    """``mla_max_tokens`` is itself capped by the chunked prefill size."""
    off_when: tuple[str, ...] = ()
    """What turns prefill graphs off before the reserve is worked out: ``speculative``,
    ``dp_attention``, ``multimodal``, ``mla``, ``pipeline``, ``moe_a2a`` (any all-to-all backend),
    ``moe_a2a_unvalidated`` (one other than DeepEP, MegaMoE and FlashInfer)."""

    def sizes(self, largest: int) -> list[int]:
        """The captured token counts up to ``largest``."""
        return _expand(self.segments, largest)


@dataclass(frozen=True)
class ReserveRule:
    """What the automatic ``mem_fraction_static`` keeps outside the static pool, in MiB."""

    base_mib: float = 512
    mib_per_prefill_token: float = 1.5
    min_prefill_tokens: int = 2048
    mib_per_graph_bs: float = 2
    mib_per_eight_ranks: float = 1024
    dp_mib_per_graph_bs: float = 3
    """Attention DP: per captured decode batch size and DP rank."""
    dp_large_graph_bs: int = 300
    dp_large_mib_per_graph_bs: float = 1.5
    """... and this much more above ``dp_large_graph_bs``."""
    floor_mib: float = 10 * 1024
    floor_above_gib: float = 60
    speculative_mib: tuple[tuple[str, float], ...] = (("STANDALONE", 6 * 1024), ("NGRAM", 0.0))
    default_speculative_mib: float = 2 * 1024
    """What other algorithms (the EAGLE family) add; 0 where the release no longer adds any."""
    dp_attention_mib: float = 0.0
    """Releases that reserve per tier: what attention DP adds."""

    def speculative_reserve_mib(self, algorithm: str | None) -> float:
        """The draft model's share of the reserve."""
        if algorithm is None:
            return 0.0
        return dict(self.speculative_mib).get(algorithm, self.default_speculative_mib)


@dataclass(frozen=True)
class Rules:
    """Everything one release decides about memory from its flags and the GPU."""

    tiers: tuple[GpuTier, ...]
    capture: CaptureRule | None
    """Decode batch sizes resolved with the flags; None: chosen at runtime (``runtime_capture``)."""
    reserve: ReserveRule = field(default_factory=ReserveRule)
    piecewise: PiecewiseRule | None = None
    large_tp: int = 4
    reserve_by_tier: bool = False
    """0.5.1 and 0.5.2 reserve a fixed amount per GPU tier, not per token and batch size."""
    speculative_max_running_requests: int = 48
    speculative_refuses_dp: tuple[str, ...] = ("STANDALONE", "NGRAM")
    """Algorithms the release refuses together with attention DP."""
    vision_factor: float = 0.95
    vision_baseline: tuple[int, int] = (24, 1024)
    vision_sensitivity: float = 0.1
    vision_clamp: tuple[float, float] = (0.8, 1.05)
    runtime_capture: RuntimeCapture | None = None
    graphs_reserved_when_disabled: bool = True
    """Whether the reserve counts decode graphs even when CUDA graphs are off."""
    graph_bs_capped_by_running_requests: bool = False
    """A default CUDA-graph max batch size never exceeds ``--max-running-requests``."""

    def tier(self, gpu_mib: float) -> GpuTier:
        """The GPU-size tier of a GPU of ``gpu_mib``."""
        return next(t for t in self.tiers if gpu_mib < t.below_gib * 1024)


@dataclass(frozen=True)
class RuntimeCapture:
    """Releases that choose decode batch sizes at runtime (0.5.1, 0.5.2): a base list, more sizes
    on larger GPUs, then at most the max batch size (which is added when the list stops short)."""

    plain: tuple[Segment, ...]
    plain_no_padding: tuple[Segment, ...]
    speculative: tuple[Segment, ...]
    larger_gpus: tuple[tuple[float, Segment], ...]
    """Sizes added on GPUs above so many MiB."""
    tail_step: int = 16
    """Sizes added from the list's end to a larger max batch size, in this step."""

    def sizes(self, max_bs: int | None, gpu_mib: float, speculating: bool, no_padding: bool) -> list[int]:
        """The captured sizes on a GPU of ``gpu_mib``, before the cut at the request slots."""
        plain = self.plain_no_padding if no_padding else self.plain
        base = self.speculative if speculating else plain
        sizes = _expand(base, _UNBOUNDED)
        for above_mib, segment in self.larger_gpus:
            if gpu_mib > above_mib:
                sizes += _expand((segment,), _UNBOUNDED)
        if max_bs:
            sizes = [size for size in sizes if size <= max_bs]
            if max(sizes) < max_bs:
                sizes += range(max(sizes), max_bs + 1, self.tail_step)
        return sorted(set(sizes))


_UNBOUNDED = 1 << 20
