"""When a campaign's search is over, read from its trials' records: a limit of its budget reached
(trials launched, GPU-hours, hours), no candidate left to run, or a sampler that only suggests
candidates already run (``MAX_REPEATS`` suggestions in a row: it has converged). A space too large
to run whole needs a budget limit before anything is launched (``check_bounded``).
"""

from __future__ import annotations

import time

from sglang_stacks.campaign.attributes import TrialRecord
from sglang_stacks.campaign.axis_keys import refuse_listed
from sglang_stacks.campaign.model_search import BudgetSpec, Strategy
from sglang_stacks.campaign.plan import Plan
from sglang_stacks.errors import HostError, SpecError
from sglang_stacks.hostops.reach import host_answers

__all__ = [
    "MAX_REPEATS",
    "check_bounded",
    "check_pool_answers",
    "check_runnable",
    "earlier_trial",
    "exhausted",
    "over_budget",
]

MAX_REPEATS = 50
"""Suggestions in a row of candidates already run after which the search has converged."""


def check_bounded(plan: Plan) -> None:
    """SpecError when the plan's candidates are too many to run them all and no budget limit ends
    the search."""
    budget = plan.campaign.budget
    if plan.listed or (budget.max_trials, budget.max_gpu_hours, budget.max_hours) != (None, None, None):
        return
    raise SpecError(
        f"Campaign {plan.name}'s axes make too many candidates to run them all; set budget.max_trials "
        "(or max_gpu_hours, or max_hours) in the campaign file."
    )


def check_runnable(plan: Plan) -> None:
    """SpecError when preflight discards every candidate of a listed plan: nothing would run, and a
    study of nothing but discards would only be left behind."""
    if not plan.listed or plan.kept():
        return
    reasons = sorted({row.reasons[0].split(":", 1)[0] for row in plan.rows if row.reasons})
    raise SpecError(
        f"Preflight discards all {len(plan.rows)} candidates of campaign {plan.name} ({', '.join(reasons)}), "
        f"so nothing would run. `sglang-stacks sweep plan {plan.name}` gives each reason; change the axes "
        "or the base stack."
    )


def over_budget(budget: BudgetSpec, found: list[TrialRecord], elapsed_s: float) -> str | None:
    """Which budget limit is reached after ``elapsed_s`` seconds of sweeping, or None."""
    if budget.max_hours is not None and elapsed_s >= budget.max_hours * 3600:
        return f"budget.max_hours {budget.max_hours:g} reached"
    launched = [r for r in found if r.launched or (r.state == "RUNNING" and r.host is not None)]
    if budget.max_trials is not None and len(launched) >= budget.max_trials:
        return f"budget.max_trials {budget.max_trials} reached"
    now = time.time()
    gpu_hours = sum(
        r.gpu_hours if r.gpu_hours is not None else (now - (r.started_at or now)) / 3600 * (r.host_gpus or 0)
        for r in launched
    )
    if budget.max_gpu_hours is not None and gpu_hours >= budget.max_gpu_hours:
        return f"budget.max_gpu_hours {budget.max_gpu_hours:g} reached ({gpu_hours:.2f} GPU-hours)"
    return None


def exhausted(plan: Plan, strategy: Strategy, found: list[TrialRecord]) -> bool:
    """No candidate is left: a grid's queue is empty, or every kept candidate of a listed space
    has its trial."""
    if any(r.state == "WAITING" for r in found):
        return False
    if strategy == "grid":
        return True
    if not plan.listed:
        return False
    taken = {r.stack for r in found if r.state != "FAIL" and r.status != "duplicate"}
    return all(row.stack in taken for row in plan.kept())


def earlier_trial(found: list[TrialRecord], stack: str, number: int) -> TrialRecord | None:
    """An earlier trial than ``number`` of the same candidate that ran, runs or was judged (the
    lowest number)."""
    same = [
        r
        for r in found
        if r.stack == stack
        and r.number < number
        and r.state in ("RUNNING", "COMPLETE", "PRUNED")
        and r.status != "duplicate"
    ]
    return same[0] if same else None


def check_pool_answers(plan: Plan) -> None:
    """SpecError naming every pool host that does not answer (a name that does not resolve, nothing
    listening on its port), before the sweep creates anything."""
    problems = []
    for index, pool_host in enumerate(plan.campaign.pool):
        for machine in pool_host.machines:
            try:
                host_answers(machine)
            except HostError as error:
                problems.append(f"pool.{index} ({pool_host.name}): {error}")
    refuse_listed(
        problems,
        f"{len(problems)} pool host(s) of campaign {plan.name} do not answer",
        "Fix the pool in the campaign file, or remove the host; nothing was created.",
    )
