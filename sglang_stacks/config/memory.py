"""A stack's per-GPU memory plan, as preflight, ``render``, the campaign and the stack outputs show it.

The plan is ``sglang_world``'s, the one the emulator runs on: the release's own settings (the
automatic ``mem_fraction_static``, chunked prefill, captured batch sizes), then one GPU filled
phase by phase (weights, KV pool, request table, CUDA graphs, draft, a full prefill chunk). Sizes
are GB as SGLang prints them (2^30 bytes). ``fitting_fraction`` is the fraction the plan says
fits for a release, for messages that name one.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict

from sglang_stacks.config.execution import executed
from sglang_stacks.config.memory_facts import stack_device, stack_launch, stack_model, stack_workload
from sglang_stacks.config.spec import StackSpec
from sglang_world import MemoryPlan as WorldPlan
from sglang_world import fitting_fractions
from sglang_world import plan_memory as world_plan
from sglang_world.execute import Answer

__all__ = ["MemoryPlan", "fitting_fraction", "plan_memory"]


def _sizes(value: Any) -> Any:
    """Batch sizes as the stack output writes them (``"1 2 4 8"``), or as a list."""
    return [int(word) for word in value.split()] if isinstance(value, str) else value


class MemoryPlan(BaseModel):
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


def _figures(plan: WorldPlan) -> dict[str, Any]:
    figures: dict[str, Any] = {"release": plan.release, "verdict": plan.verdict}
    settings, numbers = plan.settings, plan.budget
    if settings is not None and settings.refusal is None:  # a refusal's settings are moot
        figures.update(
            mem_fraction_static=settings.mem_fraction_static,
            fraction_source=settings.fraction_source,
            chunked_prefill_size=settings.chunked_prefill_size,
            max_prefill_tokens=settings.max_prefill_tokens,
            cuda_graph_max_bs=settings.cuda_graph_max_bs,
        )
    if numbers is not None:
        figures.update(
            total_gb=numbers.total_gib,
            free_after_init_gb=numbers.free_after_init_gib,
            target_weights_gb=numbers.weights_gib,
            draft_weights_gb=numbers.draft_weights_gib,
            static_pool_gb=numbers.static_pool_gib,
            kv_cache_gb=numbers.kv_pool_gib,
            max_total_num_tokens=numbers.max_total_num_tokens,
            max_running_requests=numbers.max_running_requests,
            request_table_gb=numbers.request_pool_gib,
            captured_batch_sizes=None
            if numbers.captured_batch_sizes is None
            else list(numbers.captured_batch_sizes),
            cuda_graphs_gb=numbers.cuda_graph_gib,
            draft_kv_cache_gb=numbers.draft_kv_gib,
            draft_cuda_graphs_gb=numbers.draft_cuda_graph_gib,
            largest_prefill_tokens=numbers.largest_prefill_tokens,
            activations_gb=numbers.prefill_activation_gib,
        )
    if plan.failure is not None and plan.verdict == "does_not_fit":
        figures.update(failure_phase=plan.failure.phase, failure=plan.failure.message, fix=plan.failure.fix)
    figures["unknown_reason"] = plan.unknown_reason
    return figures


def plan_memory(spec: StackSpec, release: str | None = None) -> MemoryPlan:
    """Plan one GPU's memory for ``spec`` with ``release`` (default: the stack's SGLang release)."""
    release = release or spec.environment.sglang_release
    launch = stack_launch(spec, release)
    if launch is None:
        reason = f"the stack's flags cannot be rendered for SGLang {release}"
        return MemoryPlan(
            release=release,
            total_gb=spec.host.memory_per_gpu_mib / 1024,
            unknown_reason=reason,
            flags_rendered=False,
        )
    model, device, workload = stack_model(spec), stack_device(spec), stack_workload(spec)
    answer = executed(spec, release)
    settings = answer.settings if answer is not None else None
    plan = world_plan(release, launch, model, device, workload, settings)
    figures = _figures(plan)
    figures["settings_from"] = _settings_from(release, answer)
    if plan.budget is not None:
        figures["free_memory_from"] = device.memory_source
    if settings is not None and (settings.kv_budget_gib is not None or settings.pool_refusal is not None):
        figures["pool_from"] = f"SGLang {release}'s own pool code"
    if settings is not None and settings.kv_tokens is not None:
        figures["tokens_from"] = f"SGLang {release}'s own pool code"
    elif answer is not None:
        figures["tokens_not_run"] = answer.pool_sizes_not_run or answer.pool_not_run
    if plan.verdict != "unknown" and not (settings and settings.refusal):
        smallest, largest = fitting_fractions(release, launch, model, device, workload, settings)
        figures.update(smallest_fitting_fraction=smallest, largest_fitting_fraction=largest)
    return MemoryPlan(**figures)


def _settings_from(release: str, answer: Answer | None) -> str:
    if answer is None:
        return (
            f"the project's rules for SGLang {release} (the stack names no model.config to run its code with)"
        )
    if answer.not_run is not None:
        return f"the project's rules for SGLang {release} ({answer.not_run})"
    if answer.pool_not_run is not None:
        return f"SGLang {release}'s own code; {answer.pool_not_run}"
    return f"SGLang {release}'s own code"


def fitting_fraction(spec: StackSpec, release: str | None = None) -> float | None:
    """The smallest ``mem_fraction_static`` the plan says fits ``spec`` on ``release``; None when
    no fraction does or the plan cannot judge it."""
    return plan_memory(spec, release).smallest_fitting_fraction
