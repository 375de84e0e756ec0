"""A stack's per-GPU memory plan, as preflight, ``render``, the campaign and the stack outputs show it.

The plan is ``sglang_world``'s, the one the emulator runs on: the release's own settings (the
automatic ``mem_fraction_static``, chunked prefill, captured batch sizes), then one GPU filled
phase by phase (weights, KV pool, request table, CUDA graphs, draft, a full prefill chunk). Sizes
are GB as SGLang prints them (2^30 bytes). ``fitting_fraction`` is the fraction the plan says
fits for a release, for messages that name one.
"""

from __future__ import annotations

from typing import Any

from sglang_stacks.config.execution import executed
from sglang_stacks.config.memory_facts import stack_device, stack_launch, stack_model, stack_workload
from sglang_stacks.config.memory_plan import MemoryPlan
from sglang_stacks.config.spec import StackSpec
from sglang_world import MemoryPlan as WorldPlan
from sglang_world import fitting_fractions
from sglang_world import plan_memory as world_plan
from sglang_world.execute import Answer

__all__ = ["MemoryPlan", "fitting_fraction", "plan_memory"]


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
    model, device, workload = stack_model(spec, launch.pp_size), stack_device(spec), stack_workload(spec)
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
