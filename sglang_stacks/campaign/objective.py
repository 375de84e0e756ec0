"""What a campaign maximizes, read from a trial's benchmark levels.

An objective turns the levels a trial measured into samples (one per repetition); the ranking
compares samples, so any objective with repetitions gets intervals and significance. Each
``ObjectiveSpec.metric`` maps to one scorer here; a new kind (goodput under TTFT/TPOT limits)
adds a field to ``ObjectiveSpec`` and a scorer to ``SCORERS``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sglang_stacks.campaign.model import ObjectiveSpec
from sglang_stacks.errors import BenchmarkError
from sglang_stacks.results.stats import BenchmarkResult

__all__ = ["SCORERS", "describe", "level_for", "samples"]

Scorer = Callable[[ObjectiveSpec, BenchmarkResult], tuple[float, ...]]


def level_for(objective: ObjectiveSpec, levels: Sequence[Mapping[str, Any]]) -> BenchmarkResult:
    """The benchmark level the objective reads (its concurrency)."""
    for level in levels:
        result = BenchmarkResult.model_validate(level)
        if result.concurrency == objective.concurrency:
            return result
    measured = [level.get("concurrency") for level in levels]
    raise BenchmarkError(
        f"The trial measured concurrency {measured}, not the objective's {objective.concurrency}. "
        "Add that level to the campaign's workload.concurrency."
    )


def _tok_s(objective: ObjectiveSpec, result: BenchmarkResult) -> tuple[float, ...]:
    return result.tok_s_runs


SCORERS: dict[str, Scorer] = {"tok_s": _tok_s}
"""Objective kind -> the samples it reads from the objective's level."""


def samples(objective: ObjectiveSpec, levels: Sequence[Mapping[str, Any]]) -> tuple[float, ...]:
    """The objective's value per repetition of a trial."""
    return SCORERS[objective.metric](objective, level_for(objective, levels))


def describe(objective: ObjectiveSpec) -> str:
    """The objective in words, for tables and plots."""
    return f"{objective.metric.replace('_', '/')} at concurrency {objective.concurrency}"
