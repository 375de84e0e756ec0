"""The shape of a stack's per-GPU memory plan (`MemoryPlan`), as preflight, ``render``, the campaign
and the stack outputs show it; ``sglang_stacks.config.memory`` computes it. Its own module, so what
only reads or writes a plan (the stack outputs, the providers that record them) imports no planner.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict

from sglang_stacks.shape import Shape

__all__ = ["MemoryPlan"]


def _sizes(value: Any) -> Any:
    """Batch sizes as the stack output writes them (``"1 2 4 8"``), or as a list."""
    return [int(word) for word in value.split()] if isinstance(value, str) else value


class MemoryPlan(Shape):
    """One GPU's plan for a stack and a release: the release's settings, the budget, the verdict.

    Every figure may be None: outputs written by earlier versions lack the newer ones, and a plan
    that cannot be judged lacks what it could not compute.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    release: str | None = None
    """The SGLang release whose rules made the plan."""
    verdict: Literal["fits", "does_not_fit", "unknown"] = "unknown"
    total_gb: float | None = None
    """Memory of one GPU (nvidia-smi's total)."""
    mem_fraction_static: float | None = None
    fraction_source: Literal["set", "auto", "unknown"] = "unknown"
    """``set`` in the stack, ``auto``: chosen by the release, ``unknown``: not known here."""
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int | None = None
    cuda_graph_max_bs: int | None = None
    captured_batch_sizes: Annotated[list[int] | None, BeforeValidator(_sizes)] = None
    """Decode batch sizes the server captures graphs for (the stack output writes them on one line)."""
    free_after_init_gb: float | None = None
    """What the server measures free before loading (total less driver, runtime, other processes)."""
    free_memory_from: str | None = None
    """Where the driver's reserve and the runtime's memory in ``free_after_init_gb`` come from: a
    measurement with its source, or what was assumed for this GPU."""
    target_weights_gb: float | None = None
    draft_weights_gb: float | None = None
    static_pool_gb: float | None = None
    kv_cache_gb: float | None = None
    """What the static pool leaves for the KV cache after the weights (negative: does not fit)."""
    max_total_num_tokens: int | None = None
    max_running_requests: int | None = None
    request_table_gb: float | None = None
    cuda_graphs_gb: float | None = None
    draft_kv_cache_gb: float | None = None
    draft_cuda_graphs_gb: float | None = None
    largest_prefill_tokens: int | None = None
    activations_gb: float | None = None
    smallest_fitting_fraction: float | None = None
    largest_fitting_fraction: float | None = None
    failure_phase: str | None = None
    """``load``, ``kv_pool``, ``graphs``, ``draft``, ``prefill``, ``workload`` or ``launch``."""
    failure: str | None = None
    """What SGLang prints where it fails."""
    fix: str | None = None
    unknown_reason: str | None = None
    settings_from: str | None = None
    """Who resolved the settings: ``SGLang 0.5.23's own code`` (run from its wheel on the stack's
    launch command), or the project's rules for that release and why its code was not run."""
    pool_from: str | None = None
    """Who sized the KV cache's budget: the release's own pool code when it was run, else None (the
    plan's arithmetic, 0.5.8's)."""
    tokens_from: str | None = None
    """Who sized the pool in tokens and its running limit from that budget: the release's own pool
    code when it was run, else None (the budget divided by the plan's per-token cell)."""
    tokens_not_run: str | None = None
    """Why the release's own pool code did not size the pool in tokens, when the plan has its code."""
    flags_rendered: bool = True
    """False when the stack's flags cannot be rendered for the release (preflight says why)."""

    @property
    def fits(self) -> bool:
        """Whether the verdict is ``fits``."""
        return self.verdict == "fits"

    def as_dict(self) -> dict[str, Any]:
        """Every figure, for JSON; four decimals say all a GB needs to."""
        figures = self.model_dump()
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}

    def as_output(self) -> dict[str, Any]:
        """`as_dict` as the stack output shows it, a line a figure and none for what is not known: the
        captured batch sizes (as many as 52) as one line of numbers, which reads back as the list."""
        figures = {key: value for key, value in self.as_dict().items() if value is not None}
        if "captured_batch_sizes" in figures:
            figures["captured_batch_sizes"] = " ".join(str(bs) for bs in figures["captured_batch_sizes"])
        return figures
