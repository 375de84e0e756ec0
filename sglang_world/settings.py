"""What a release resolves from the launch flags and the GPU: the automatic ``mem_fraction_static``,
the chunked prefill size, the CUDA-graph batch sizes, the running-request limit.

``resolve_settings`` applies one release's ``Rules`` (``releases.py``) in the order the release's
``ServerArgs`` does: GPU-size defaults, the captured batch sizes, the reserve and the fraction
(lowered for a vision tower), then attention DP's split of the prefill chunk and speculative
decoding's request limit. A launch the release refuses comes back with ``refusal`` set.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_world.facts import Launch
from sglang_world.rules import Rules

__all__ = ["ModelKind", "ServerSettings", "resolve_with_rules"]


@dataclass(frozen=True)
class ModelKind:
    """What of the model a release's settings look at."""

    mla: bool = False
    """Multi-head latent attention."""
    vision: tuple[int, int] | None = None
    """Vision tower layers and hidden size; None for a text-only model."""


@dataclass(frozen=True)
class ServerSettings:
    """The memory settings a release resolves, before anything is loaded."""

    release: str
    """The release whose rules resolved them."""
    mem_fraction_static: float
    fraction_source: str
    """``set`` (the launch's), or ``auto`` (the release's choice)."""
    chunked_prefill_size: int
    """Tokens per prefill chunk after attention DP's split; -1 when chunking is off."""
    max_prefill_tokens: int
    cuda_graph_max_bs: int | None
    """The largest decode batch captured; None when the runtime picks (0.5.1, 0.5.2) or graphs are off."""
    cuda_graph_bs: tuple[int, ...]
    """Decode batch sizes captured, before the runtime's cap by the request pool; empty when off."""
    cuda_graph_disabled: bool
    max_running_requests: int | None
    """The launch's limit, or speculative decoding's default; None: derived from the KV pool."""
    reserved_mib: float | None = None
    """What the automatic fraction kept outside the static pool; None when the fraction was set."""
    refusal: str | None = None
    """Why the release refuses this launch (its own message); the other fields are then moot."""
    refusal_class: str = "ValueError"
    """What the release raises with ``refusal`` (``AssertionError`` for an ``assert``)."""
    executed: bool = False
    """Resolved by the release's own code, run from its wheel (``execute.py``), not by the project's rules."""
    kv_budget_gib: float | None = None
    """What the release's own pool code leaves the KV cache once the weights (target and draft) are
    loaded; None when it was not run (the plan then sizes the pool as 0.5.8 does)."""
    pool_refusal: str | None = None
    """What the release's pool code raises when the loaded weights leave the KV cache nothing."""
    kv_budget_by_step: tuple[float | None, ...] = ()
    """The release's KV budget at ``mem_fraction_static`` 0.01 to 0.99 (None where it refuses), the
    same code run at each; empty when it was not run."""
    kv_tokens: int | None = None
    """The KV pool in tokens the release's own pool code sizes from ``kv_budget_gib`` (its per-token
    cell with the draft's KV, page alignment, ``--max-total-tokens``); None: the plan divides the
    budget by its own cell."""
    running_limit: int | None = None
    """The running requests the release's pool code admits with ``kv_tokens`` (per attention-DP
    worker); None when it was not run."""
    request_slots: int | None = None
    """The request-to-token table's slots the release's pool code sizes (to 0.5.9 estimated from the
    tokens it profiled, from 0.5.10 its running limit); None when it was not run."""
    draft_after_pool: bool = False
    """The release's pool code sized the target's pool before the draft model loaded (0.5.7 to
    0.5.13): ``kv_budget_gib`` is the target's alone, and the draft's weights and its KV of as many
    tokens come after the pool. From 0.5.14 the draft's KV is inside the pool."""


def _fraction(
    rules: Rules,
    launch: Launch,
    gpu_mib: float,
    chunk: int,
    graph_bs: int,
    max_prefill: int,
    piecewise_sizes: list[int] | None,
    model: ModelKind,
) -> tuple[float, float]:
    reserve = rules.reserve
    ranks = launch.tp_size * launch.pp_size
    if rules.reserve_by_tier:
        tier = rules.tier(gpu_mib)
        reserved = (tier.reserve_gib + ranks * tier.reserve_gib_per_rank) * 1024
        reserved += reserve.speculative_reserve_mib(launch.speculative)
        if launch.attn_dp_size > 1:
            reserved += reserve.dp_attention_mib
    else:
        tokens = chunk if chunk > 0 else max_prefill
        reserved = reserve.base_mib + max(tokens, reserve.min_prefill_tokens) * reserve.mib_per_prefill_token
        if not launch.cuda_graph_disabled or rules.graphs_reserved_when_disabled:
            reserved += graph_bs * reserve.mib_per_graph_bs
        reserved += ranks / 8 * reserve.mib_per_eight_ranks
        if launch.attn_dp_size > 1:
            reserved += graph_bs * launch.attn_dp_size * reserve.dp_mib_per_graph_bs
            if graph_bs > reserve.dp_large_graph_bs:
                reserved += graph_bs * launch.attn_dp_size * reserve.dp_large_mib_per_graph_bs
        if piecewise_sizes is not None and rules.piecewise is not None:
            reserved += _piecewise_reserve(rules, piecewise_sizes, model)
        if gpu_mib > reserve.floor_above_gib * 1024:
            reserved = max(reserved, reserve.floor_mib)
        reserved += reserve.speculative_reserve_mib(launch.speculative)
    fraction = round((gpu_mib - reserved) / gpu_mib, 3)
    if model.vision is not None:
        fraction *= _vision_factor(rules, model.vision)
    return fraction, reserved


def _piecewise_reserve(rules: Rules, sizes: list[int], model: ModelKind) -> float:
    piecewise = rules.piecewise
    assert piecewise is not None
    if model.mla and piecewise.mla_reserve_mib is not None:
        return piecewise.mla_reserve_mib
    largest = max(sizes, default=0)
    if piecewise.reserve == "quarter_of_max":
        return float(largest // 4)
    if piecewise.reserve == "eighth_of_max":
        return float(largest // 8)
    return len(sizes) * 8.0


def _vision_factor(rules: Rules, vision: tuple[int, int]) -> float:
    layers, hidden = vision
    base_layers, base_hidden = rules.vision_baseline
    ratio = layers * hidden**2 / (base_layers * base_hidden**2)
    low, high = rules.vision_clamp
    return rules.vision_factor * max(low, min(high, 1.0 - rules.vision_sensitivity * (ratio - 1.0)))


def resolve_with_rules(
    release: str,
    rules: Rules,
    launch: Launch,
    gpu_mib: float,
    model: ModelKind,
    default_max_prefill_tokens: int,
) -> ServerSettings:
    """The settings ``release`` (following ``rules``) resolves for ``launch`` on a GPU of ``gpu_mib``."""
    speculating = launch.speculative is not None
    if launch.attn_dp_size > 1 and launch.speculative in rules.speculative_refuses_dp:
        kind = "standalone" if launch.speculative == "STANDALONE" else "ngram"
        return _refused(
            release, launch, f"Currently {kind} speculative decoding does not support dp attention."
        )
    tier = rules.tier(gpu_mib)
    large = launch.tp_size >= rules.large_tp
    chunk = (
        launch.chunked_prefill_size if launch.chunked_prefill_size is not None else tier.chunked_prefill_size
    )
    graph_bs = launch.cuda_graph_max_bs
    if graph_bs is None:
        graph_bs = tier.cuda_graph_max_bs_large_tp if large else tier.cuda_graph_max_bs
        limit = launch.max_running_requests
        if rules.graph_bs_capped_by_running_requests and limit is not None and graph_bs is not None:
            graph_bs = min(graph_bs, limit)
    max_prefill = launch.max_prefill_tokens or default_max_prefill_tokens
    sizes: tuple[int, ...] = ()
    if launch.cuda_graph_bs:
        sizes = tuple(sorted(launch.cuda_graph_bs))
        graph_bs = max(sizes)
    elif rules.capture is not None and graph_bs is not None:
        sizes = tuple(rules.capture.sizes(graph_bs, speculating, launch.disable_cuda_graph_padding))
    elif rules.runtime_capture is not None:
        runtime = rules.runtime_capture
        sizes = tuple(runtime.sizes(graph_bs, gpu_mib, speculating, launch.disable_cuda_graph_padding))
    piecewise_sizes = _piecewise_sizes(rules, launch, chunk, model)
    fraction, reserved = launch.mem_fraction_static, None
    if fraction is None:
        fraction, reserved = _fraction(
            rules, launch, gpu_mib, chunk, graph_bs or 0, max_prefill, piecewise_sizes, model
        )
    if launch.attn_dp_size > 1:
        chunk = chunk // launch.attn_dp_size
    running = launch.max_running_requests
    if running is None and speculating:
        running = rules.speculative_max_running_requests
    return ServerSettings(
        release=release,
        mem_fraction_static=fraction,
        fraction_source="set" if launch.mem_fraction_static else "auto",
        chunked_prefill_size=chunk,
        max_prefill_tokens=max_prefill,
        cuda_graph_max_bs=graph_bs,
        cuda_graph_bs=() if launch.cuda_graph_disabled else sizes,
        cuda_graph_disabled=launch.cuda_graph_disabled,
        max_running_requests=running,
        reserved_mib=reserved,
    )


def _piecewise_sizes(rules: Rules, launch: Launch, chunk: int, model: ModelKind) -> list[int] | None:
    """The prefill token counts captured as piecewise graphs; None when they are off."""
    piecewise = rules.piecewise
    if piecewise is None or not (piecewise.on_by_default or launch.enable_piecewise_cuda_graph):
        return None
    turned_off = {
        "speculative": launch.speculative is not None,
        "dp_attention": launch.attn_dp_size > 1,
        "multimodal": model.vision is not None,
        "mla": model.mla,
        "pipeline": launch.pp_size > 1,
        "moe_a2a": launch.moe_a2a_backend != "none",
        "moe_a2a_unvalidated": launch.moe_a2a_backend not in ("none", "deepep", "megamoe", "flashinfer"),
    }
    if any(turned_off[reason] for reason in piecewise.off_when):
        return None
    largest = chunk
    if model.mla and piecewise.mla_max_tokens is not None:
        largest = (
            min(piecewise.mla_max_tokens, chunk)
            if piecewise.mla_capped_by_chunk
            else piecewise.mla_max_tokens
        )
    if launch.max_total_tokens is not None:
        largest = min(largest, launch.max_total_tokens)
    if piecewise.capped_by_context and launch.context_length is not None:
        largest = min(largest, launch.context_length)
    return piecewise.sizes(largest)


def _refused(release: str, launch: Launch, message: str) -> ServerSettings:
    return ServerSettings(
        release=release,
        mem_fraction_static=launch.mem_fraction_static or 0.0,
        fraction_source="set" if launch.mem_fraction_static else "auto",
        chunked_prefill_size=launch.chunked_prefill_size or 0,
        max_prefill_tokens=launch.max_prefill_tokens or 0,
        cuda_graph_max_bs=launch.cuda_graph_max_bs,
        cuda_graph_bs=(),
        cuda_graph_disabled=launch.cuda_graph_disabled,
        max_running_requests=launch.max_running_requests,
        refusal=message,
    )
