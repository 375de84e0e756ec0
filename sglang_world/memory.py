"""The memory plan: a release's settings, the per-GPU budget, and where (if anywhere) it fails.

``plan_memory`` is the one answer preflight, ``render``, the campaign's feasibility and the
emulator share. The verdict is ``fits`` (the server starts, captures its graphs, and a full
prefill chunk runs), ``does_not_fit`` with the first phase that fails and what SGLang prints
there, or ``unknown`` with the reason (a release or a fact the project does not know).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cache
from typing import Literal

from sglang_flags import load_table
from sglang_world.budget import Budget, budget
from sglang_world.facts import DeviceFacts, Launch, ModelFacts, Workload
from sglang_world.failures import Failure, first_failure
from sglang_world.launch import MEMORY_ENVIRONMENT
from sglang_world.pool_code import pd_planned
from sglang_world.releases import rules_for
from sglang_world.settings import ModelKind, ServerSettings, resolve_with_rules

__all__ = [
    "MemoryPlan",
    "Verdict",
    "Workload",
    "fitting_fractions",
    "plan_memory",
    "resolve_settings",
    "unjudged_reason",
]

Verdict = Literal["fits", "does_not_fit", "unknown"]


@dataclass(frozen=True)
class MemoryPlan:
    """One GPU's plan for a launch of one release."""

    release: str
    launch: Launch
    settings: ServerSettings | None
    """What the release resolves; None when its rules are unknown."""
    budget: Budget | None
    verdict: Verdict
    failure: Failure | None = None
    """Where the model says the server fails (set for ``does_not_fit``; may be set for ``unknown``)."""
    unknown_reason: str | None = None
    """Why the plan cannot be judged (``unknown``)."""

    @property
    def fits(self) -> bool:
        """Whether the verdict is ``fits``."""
        return self.verdict == "fits"

    @property
    def mem_fraction_static(self) -> float | None:
        """The fraction in effect: the launch's, or the release's automatic choice."""
        if self.settings is not None:
            return self.settings.mem_fraction_static
        return self.launch.mem_fraction_static

    @property
    def max_total_num_tokens(self) -> int | None:
        """The KV pool in tokens (None when unknown)."""
        return self.budget.max_total_num_tokens if self.budget else None


def _max_prefill_default(release: str) -> int:
    """``--max-prefill-tokens``'s default, from the release's own flag table."""
    flag = load_table(release).by_dest("max_prefill_tokens")
    if flag is None or flag.default is None:
        raise KeyError(f"SGLang {release}'s flag table has no default for --max-prefill-tokens")
    return int(flag.default)


def _on(value: str) -> bool:
    return value.strip().lower() not in ("", "0", "false", "no", "off")


def unjudged_reason(release: str, launch: Launch, executed: bool = False) -> str | None:
    """Why the project cannot judge ``launch`` on ``release``, or None when it can. ``executed``: the
    settings are the release's own code's, which resolves a disaggregated worker's role itself."""
    if rules_for(release) is None and not executed:
        return f"the project does not know SGLang {release}'s memory rules"
    if launch.enable_piecewise_cuda_graph:
        return "piecewise CUDA graphs are not in the project's model"
    if launch.disaggregation_mode != "null" and not pd_planned(release) and not executed:
        return (
            f"SGLang {release} sizes a {launch.disaggregation_mode} worker in code the project's model does"
            " not follow (it resolves the worker's role before or inside its memory settings; read from its"
            " wheel by python -m sglang_world.pool_code)"
        )
    if launch.pp_size > 1 and not executed:
        return "pipeline parallelism is not in the grid the project's rules are checked on"
    set_here = [name for name, value in launch.environment if name in MEMORY_ENVIRONMENT and _on(value)]
    if set_here:
        return f"{set_here[0]} changes when SGLang sizes the KV pool, which the project does not model"
    return None


@cache
def _resolve(release: str, launch: Launch, gpu_mib: float, kind: ModelKind) -> ServerSettings | None:
    rules = rules_for(release)
    if rules is None:
        return None
    settings = resolve_with_rules(release, rules, launch, gpu_mib, kind, _max_prefill_default(release))
    if launch.disaggregation_mode == "prefill" and pd_planned(release):
        # ServerArgs._handle_pd_disaggregation, after the memory settings: "Cuda graph is disabled for
        # prefill server when piecewise cuda graph is not enabled".
        settings = dataclasses.replace(settings, cuda_graph_disabled=True, cuda_graph_bs=())
    return settings


def resolve_settings(release: str, launch: Launch, gpu_mib: float, kind: ModelKind) -> ServerSettings | None:
    """What ``release`` resolves for ``launch`` on a GPU of ``gpu_mib`` (nvidia-smi's total); None
    when the project does not know the release's rules."""
    return _resolve(release, launch, gpu_mib, kind)


def plan_memory(
    release: str,
    launch: Launch,
    model: ModelFacts,
    device: DeviceFacts,
    workload: Workload | None = None,
    settings: ServerSettings | None = None,
) -> MemoryPlan:
    """The plan of ``launch`` with ``release`` for ``model`` on one GPU of ``device``.

    ``settings`` are what the release's own code resolved for the launch (``execute.py``), used in
    place of the project's rules for it. A launch the project cannot judge (``unjudged_reason``)
    still gets the settings, budget and failure the model predicts when the release's rules are known
    (the emulator runs on them); only its verdict is ``unknown``.
    """
    kind = ModelKind(mla=model.mla, vision=model.vision)
    settings = settings or resolve_settings(release, launch, device.total_mib, kind)
    reason = unjudged_reason(release, launch, executed=settings is not None and settings.executed)
    if settings is None:
        return MemoryPlan(release, launch, None, None, "unknown", unknown_reason=reason)
    if settings.refusal is not None:
        refused = Failure(
            "launch", f"{settings.refusal_class}: {settings.refusal}", "Change the flags the release refuses."
        )
        verdict: Verdict = "unknown" if reason else "does_not_fit"
        return MemoryPlan(release, launch, settings, None, verdict, refused, reason)
    numbers = budget(settings, launch, model, device)
    failure, missing = first_failure(settings, launch, numbers, workload)
    reason = reason or (None if failure else missing)
    verdict = "unknown" if reason else "does_not_fit" if failure else "fits"
    return MemoryPlan(release, launch, settings, numbers, verdict, failure, reason)


def fitting_fractions(
    release: str,
    launch: Launch,
    model: ModelFacts,
    device: DeviceFacts,
    workload: Workload | None = None,
    settings: ServerSettings | None = None,
) -> tuple[float | None, float | None]:
    """The smallest and largest ``mem_fraction_static`` (two decimals) at which the plan fits;
    (None, None) when none does or the plan cannot be judged. ``settings``: as for ``plan_memory``,
    each fraction tried in their place.

    A larger fraction only ever grows the KV pool and shrinks what is left beside it, so the
    fractions that fit are one interval: each end is found by bisection on which way a plan fails.
    """

    def at(step: int) -> MemoryPlan:
        fraction = step / 100
        tried = None
        if settings is not None:
            budget_at = settings.kv_budget_by_step[step - 1] if settings.kv_budget_by_step else None
            refused = settings.kv_budget_by_step and budget_at is None
            tried = dataclasses.replace(
                settings,
                mem_fraction_static=fraction,
                fraction_source="set",
                reserved_mib=None,
                kv_budget_gib=budget_at,
                pool_refusal="the release's pool code refuses this fraction" if refused else None,
                kv_tokens=None,  # the launch fraction's pool: another fraction's is its budget's
                running_limit=None,
                request_slots=None,
            )
        return plan_memory(
            release, dataclasses.replace(launch, mem_fraction_static=fraction), model, device, workload, tried
        )

    def failing(step: int, direction: str) -> bool:
        plan = at(step)
        return plan.failure is not None and plan.failure.direction == direction

    low, high = 1, 99
    while low < high:  # the first step that is not too small
        middle = (low + high) // 2
        low, high = (middle + 1, high) if failing(middle, "raise") else (low, middle)
    first = low
    low, high = first, 99
    while low < high:  # the last step that is not too large
        middle = (low + high + 1) // 2
        low, high = (low, middle - 1) if failing(middle, "lower") else (middle, high)
    last = low
    ends = [at(step) for step in (first, last)]
    if all(plan.fits for plan in ends):
        return first / 100, last / 100
    return None, None
