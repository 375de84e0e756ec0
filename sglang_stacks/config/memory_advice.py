"""What a server that ran out of GPU memory is told to change: the memory plan's fractions for the
stack's SGLang release, recorded with the server so that its failure names a value other than the
one already set. `memory_advice` is the one place that asks the planner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import ConfigDict

from sglang_stacks.shape import Shape

if TYPE_CHECKING:
    from sglang_stacks.config.spec import StackSpec

__all__ = ["MemoryAdvice", "memory_advice"]


class MemoryAdvice(Shape):
    """One GPU's memory plan for a stack, as far as an out-of-memory fix needs it."""

    # Pulumi leaves an input's null fields out of the state: each of them has its default.
    model_config = ConfigDict(frozen=True, extra="ignore")

    release: str
    """The SGLang release the plan is for."""
    mem_fraction_static: float | None = None
    """The stack's fraction; None when the release chooses it."""
    fraction_in_effect: float | None = None
    """The stack's fraction, or the release's automatic one when the plan knows it."""
    smallest_fitting_fraction: float | None = None
    """The smallest fraction that leaves a KV cache; None when none does."""
    largest_fitting_fraction: float | None = None
    """The largest fraction that leaves room for CUDA graphs and activations; None when none does."""
    weights_gb: float
    """Target and draft weights on each GPU."""
    total_gb: float
    """Memory of one GPU."""
    rest_needed_gb: float
    """What CUDA graphs, activations and the draft reserve need outside the static pool."""
    cuda_graph_max_bs: int
    """The largest captured decode batch in effect (0 without CUDA graphs)."""
    tp_size: int
    """GPUs the model is split over."""
    kv_cache_gb: float | None = None
    """The KV cache per GPU at the fraction in effect (None in a plan recorded before it was kept):
    memory another process holds beyond it leaves the server none."""
    gpu_count: int | None = None
    """GPUs of the host (None in a plan recorded before it was kept): a fix never asks for more."""

    @property
    def setting(self) -> str:
        """The fraction as the stack has it, for a sentence: ``0.77``, or the release's choice."""
        if self.mem_fraction_static is not None:
            return f"{self.mem_fraction_static:g}"
        if self.fraction_in_effect is not None:
            return f"unset (SGLang {self.release} chose {self.fraction_in_effect:.3g})"
        return f"unset (SGLang {self.release} chose it)"


def memory_advice(spec: StackSpec) -> MemoryAdvice:
    """The memory plan of ``spec`` for its SGLang release, as an out-of-memory fix reads it."""
    from sglang_stacks.config.memory import plan_memory

    plan = plan_memory(spec)
    beside = (
        plan.request_table_gb,
        plan.cuda_graphs_gb,
        plan.draft_kv_cache_gb,
        plan.draft_cuda_graphs_gb,
        plan.activations_gb,
    )
    return MemoryAdvice(
        release=spec.environment.sglang_release,
        mem_fraction_static=spec.server.mem_fraction_static,
        fraction_in_effect=plan.mem_fraction_static,
        smallest_fitting_fraction=plan.smallest_fitting_fraction,
        largest_fitting_fraction=plan.largest_fitting_fraction,
        weights_gb=(plan.target_weights_gb or spec.model.weights_gb_per_gpu(spec.tp_size))
        + (plan.draft_weights_gb or 0.0),
        total_gb=plan.total_gb or spec.host.memory_per_gpu_mib / 1024,
        # Beside the static pool: the draft's weights count there, not in the pool.
        rest_needed_gb=sum(value or 0.0 for value in beside) + (plan.draft_weights_gb or 0.0),
        cuda_graph_max_bs=max(plan.captured_batch_sizes or [0]),
        tp_size=spec.tp_size,
        kv_cache_gb=plan.kv_cache_gb,
        gpu_count=spec.host.gpu_count,
    )
