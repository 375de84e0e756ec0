"""The search strategies as Optuna samplers, seeded with ``search.seed``: ``grid`` (every kept
candidate, enqueued in file order by ``sweep run``, a random sampler behind it), ``random``, ``tpe``
(the default once the kept candidates outnumber the budget; with one objective it opens from the
base stack one axis at a time, ``opening``) and ``nsga2``; and early stop (``early_stop``) as the
study's pruner, fed the first objective's samples one repetition a step.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import optuna

from sglang_stacks.campaign.early_stop import IntervalPruner
from sglang_stacks.campaign.model import CampaignSpec
from sglang_stacks.campaign.model_search import Strategy
from sglang_stacks.campaign.opening import OpeningSampler, Preview
from sglang_stacks.campaign.plan import judge
from sglang_stacks.campaign.space import SearchSpace
from sglang_stacks.config.memory import plan_memory
from sglang_stacks.config.spec import StackSpec

__all__ = ["admitted_share", "make_pruner", "make_sampler", "report_repetitions", "startup_trials"]


def startup_trials(campaign: CampaignSpec, strategy: Strategy) -> int:
    """TPE's random suggestions before its model, or NSGA-II's population."""
    if campaign.search.startup_trials is not None:
        return campaign.search.startup_trials
    if strategy == "nsga2":
        return 8
    limit = campaign.budget.max_trials
    return 10 if limit is None else min(10, max(4, limit // 4))


OPENING_MARGIN = 0.01
"""The lead (relative) a trial needs over the opening's incumbent to replace it."""
SLOWER = frozenset(
    {
        "pcie-custom-all-reduce",
        "benchmark-over-running-limit",
        "benchmark-over-graph-bs",
        "nccl-tree-cuda-graphs",
    }
)
"""Preflight's warnings that a kept candidate serves the workload slower than it could: the
opening passes such candidates over (the model may still suggest them)."""


def _preview(campaign: CampaignSpec, space: SearchSpace) -> Callable[[Mapping[str, Any]], Preview]:
    """What preflight and the memory plan say of a point of ``space`` before it is launched."""

    def preview(params: Mapping[str, Any]) -> Preview:
        row = judge(campaign.base, campaign, space.candidate(params))
        clean = row.verdict == "kept" and not SLOWER.intersection(row.warnings)
        return Preview(clean, 1.0 if row.spec is None else admitted_share(row.spec))

    return preview


def admitted_share(spec: StackSpec) -> float:
    """The share of the benchmark's streams (its highest concurrency, each a prompt and its output)
    that the memory plan's KV pool and the running limit hold at once; 1.0 when the plan cannot say."""
    streams = max(spec.benchmark.concurrency)
    held = float(streams)
    tokens = plan_memory(spec).max_total_num_tokens
    if tokens is not None:
        held = min(held, tokens // (spec.benchmark.input_len + spec.benchmark.output_len))
    if spec.server.max_running_requests is not None:
        held = min(held, spec.server.max_running_requests)
    return held / streams


def make_sampler(
    campaign: CampaignSpec, strategy: Strategy, space: SearchSpace | None = None
) -> optuna.samplers.BaseSampler:
    """The sampler of ``strategy``, seeded with ``search.seed``. ``grid`` enqueues its candidates
    instead of sampling (``sweep run`` does it): a random sampler stands behind it. ``tpe`` with one
    objective opens from the base stack of ``space`` (``opening``) when given it."""
    seed = campaign.search.seed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if strategy == "tpe":
            model = optuna.samplers.TPESampler(
                seed=seed,
                n_startup_trials=startup_trials(campaign, strategy),
                multivariate=True,
                constant_liar=True,  # the hosts' running trials are not suggested again meanwhile
            )
            if space is None or len(campaign.goals) > 1:
                return model
            return OpeningSampler(
                space.distributions(), space.base_params(), model, OPENING_MARGIN, _preview(campaign, space)
            )
        if strategy == "nsga2":
            return optuna.samplers.NSGAIISampler(
                seed=seed, population_size=startup_trials(campaign, strategy)
            )
    return optuna.samplers.RandomSampler(seed=seed)


def make_pruner(campaign: CampaignSpec, total_repetitions: int) -> optuna.pruners.BasePruner:
    """The early stop rule (``early_stop``) as a pruner, with the campaign's noise, or none."""
    if campaign.early_stop is None:
        return optuna.pruners.NopPruner()
    return IntervalPruner(total_repetitions, campaign.noise.noise())


def report_repetitions(trial: optuna.Trial, samples: Sequence[float], first_step: int = 0) -> None:
    """Report the first objective's samples as the trial's intermediate values, one step per
    repetition from ``first_step``: what the interval pruner reads."""
    for step, value in enumerate(samples, start=first_step):
        trial.report(value, step)
