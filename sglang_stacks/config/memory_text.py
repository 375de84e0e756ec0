"""A memory plan in sentences: what ``render`` prints and preflight's memory findings say."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sglang_stacks.config.memory_plan import MemoryPlan

__all__ = ["explain", "fraction_fix", "verdict_line"]

_PHASES = {
    "load": "the weights do not fit in what is free",
    "kv_pool": "the weights leave the static pool no KV cache",
    "graphs": "CUDA-graph capture runs out of memory beside the KV pool",
    "draft": "the draft model, its KV cache and graphs do not fit beside the KV pool",
    "prefill": "the first prefill of a full chunk runs out of memory beside the KV pool",
    "workload": "the benchmark's prompts are longer than the KV pool admits",
    "launch": "the release refuses these flags",
}


def _fraction(value: float | None) -> str:
    return "none below 1.0" if value is None else f"{value:.2f}"


def _source(plan: MemoryPlan) -> str:
    if plan.fraction_source == "set":
        return "set in the stack"
    return f"chosen by SGLang {plan.release} itself"


def fraction_fix(plan: MemoryPlan) -> str:
    """What to set mem_fraction_static to, as a sentence, or the plan's own fix."""
    smallest, largest = plan.smallest_fitting_fraction, plan.largest_fitting_fraction
    if smallest is None or largest is None:
        return (
            (plan.fix or "") + " No mem_fraction_static fits: lower cuda_graph_max_bs or the chunked "
            "prefill size, drop the draft model, or use more GPUs (tp_size)."
        )
    current = plan.mem_fraction_static or 0.0
    if current < smallest:
        return f"Set mem_fraction_static to {smallest:.2f} or more (up to {largest:.2f} fits)."
    if current > largest:
        return f"Set mem_fraction_static to {largest:.2f} or less (from {smallest:.2f} fits)."
    return plan.fix or ""


def verdict_line(plan: MemoryPlan) -> str:
    """The plan's verdict in one sentence."""
    fraction = f"mem_fraction_static {plan.mem_fraction_static:.3g}" if plan.mem_fraction_static else ""
    if plan.verdict == "unknown":
        return f"Verdict: the plan cannot be judged: {plan.unknown_reason}."
    if plan.verdict == "fits":
        tokens = f"{plan.max_total_num_tokens:,}" if plan.max_total_num_tokens is not None else "?"
        return (
            f"Verdict: fits at {fraction} ({_source(plan)}): the KV pool holds {tokens} tokens; "
            f"fractions from {_fraction(plan.smallest_fitting_fraction)} to "
            f"{_fraction(plan.largest_fitting_fraction)} fit."
        )
    why = _PHASES.get(plan.failure_phase or "", "it runs out of memory")
    said = (plan.failure or "").splitlines()[0] if plan.failure else ""
    if plan.failure_phase == "launch":
        return f"Verdict: does not start: SGLang {plan.release} refuses the launch before it loads: {said}"
    return (
        f"Verdict: does not fit at {fraction} ({_source(plan)}): {why}; SGLang stops with {said} "
        f"The smallest fraction that fits is {_fraction(plan.smallest_fitting_fraction)}, the largest "
        f"{_fraction(plan.largest_fitting_fraction)}."
    )


def explain(plan: MemoryPlan) -> list[str]:
    """The plan as sentences a user reads before launching."""
    lines = []
    if plan.total_gb is not None and plan.free_after_init_gb is not None:
        source = f": {plan.free_memory_from}" if plan.free_memory_from else ""
        lines.append(
            f"GPU memory: {plan.total_gb:.2f} GB per GPU, {plan.free_after_init_gb:.2f} GB free when SGLang "
            f"measures it (after the driver's reserve, the CUDA context, cuBLAS and NCCL{source})."
        )
    if plan.mem_fraction_static is not None and plan.chunked_prefill_size is not None:
        graphs = "CUDA graphs off"
        if plan.captured_batch_sizes:
            sizes = plan.captured_batch_sizes
            graphs = f"CUDA graphs for {len(sizes)} batch sizes up to {max(sizes)}"
        by = f" ({plan.settings_from})" if plan.settings_from else ""
        lines.append(
            f"SGLang {plan.release}'s settings{by}: mem_fraction_static {plan.mem_fraction_static:.3g} "
            f"({_source(plan)}), chunked prefill {plan.chunked_prefill_size} tokens, {graphs}."
        )
    if plan.static_pool_gb is not None and plan.kv_cache_gb is not None:
        weights = f"target weights {plan.target_weights_gb:.2f} GB"
        tokens = f" ({plan.max_total_num_tokens:,} tokens)" if plan.max_total_num_tokens else ""
        kv = f"KV cache {plan.kv_cache_gb:.2f} GB{tokens}"
        lines.append(f"Static pool: {plan.static_pool_gb:.2f} GB = {weights} + {kv}.")
    beside = [
        (name, value)
        for name, value in (
            ("request table", plan.request_table_gb),
            ("CUDA graphs", plan.cuda_graphs_gb),
            ("draft weights", plan.draft_weights_gb),
            ("draft KV cache", plan.draft_kv_cache_gb),
            ("draft graphs", plan.draft_cuda_graphs_gb),
            (f"a prefill of {plan.largest_prefill_tokens} tokens", plan.activations_gb),
        )
        if value
    ]
    if beside and plan.failure_phase not in ("load", "kv_pool"):
        lines.append(
            "Beside the pool: " + ", ".join(f"{name} {value:.2f} GB" for name, value in beside) + "."
        )
    lines.append(verdict_line(plan))
    return lines
