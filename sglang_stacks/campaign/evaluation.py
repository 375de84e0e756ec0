"""A trial judged by its campaign: the objective values and SLO constraints of its benchmark levels
(``evaluate``), and what a trial that served nothing scores. Besides the SLOs every trial has two
constraints: ``preflight`` (violated by a candidate preflight discards) and ``launch`` (violated by
a trial that failed on its host), so the samplers learn to stay away from both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from sglang_stacks.campaign.model import CampaignSpec
from sglang_stacks.campaign.model_goals import ConstraintSpec
from sglang_stacks.campaign.objective import measure, unit
from sglang_stacks.results.stats import BenchmarkResult, mean

__all__ = [
    "LAUNCH",
    "PREFLIGHT",
    "Evaluation",
    "Violation",
    "constraint_values",
    "evaluate",
    "failure_values",
]

PREFLIGHT = "preflight"
"""The constraint a candidate preflight discards violates (1.0); 0 for every other trial."""
LAUNCH = "launch"
"""The constraint a trial that failed on its host violates (1.0); 0 for every other trial."""


@dataclass(frozen=True)
class Violation:
    """One SLO constraint a trial missed."""

    constraint: ConstraintSpec
    measured: float

    @property
    def by(self) -> float:
        """How far beyond the bound, in the metric's unit."""
        bound = self.constraint.max if self.constraint.max is not None else self.constraint.min
        assert bound is not None
        return abs(self.measured - bound)

    def describe(self) -> str:
        """``ttft_p99_ms at concurrency 16 was 612.0 ms, 112.0 ms (22 %) over its max 500``."""
        spec = self.constraint
        bound = spec.max if spec.max is not None else spec.min
        assert bound is not None
        side = "over its max" if spec.max is not None else "under its min"
        share = f" ({self.by / abs(bound) * 100:.0f} %)" if bound else ""
        what = unit(spec.metric)
        return (
            f"{spec.metric} at {spec.at.describe()} was {self.measured:.1f} {what}, {self.by:.1f} {what}"
            f"{share} {side} {bound:g}"
        )


@dataclass(frozen=True)
class Evaluation:
    """A measured trial judged by the campaign: its objective values, the first objective's
    samples, and its SLO constraints."""

    values: tuple[float, ...]
    """Per objective: the mean of its samples."""
    samples: tuple[float, ...]
    """The first objective's samples (one per repetition for throughputs)."""
    constraints: dict[str, float] = field(default_factory=dict)
    """Constraint name -> how far beyond its bound, relative to it (0 when met)."""
    violations: tuple[Violation, ...] = ()

    @property
    def feasible(self) -> bool:
        return not self.violations


def _relative_excess(spec: ConstraintSpec, measured: float) -> float:
    if spec.max is not None:
        return max(0.0, (measured - spec.max) / (abs(spec.max) or 1.0))
    assert spec.min is not None
    return max(0.0, (spec.min - measured) / (abs(spec.min) or 1.0))


def evaluate(campaign: CampaignSpec, levels: Sequence[BenchmarkResult], gpus: int = 1) -> Evaluation:
    """The objectives and constraints of a trial that measured ``levels`` with a server on ``gpus``
    GPUs. Raises BenchmarkError when a level or metric the campaign reads is missing."""
    per_goal = [measure(goal.metric, goal.level, levels, gpus) for goal in campaign.goals]
    constraints = {PREFLIGHT: 0.0, LAUNCH: 0.0}
    violations: list[Violation] = []
    for spec in campaign.subject_to:
        measured = mean(measure(spec.metric, spec.at, levels, gpus))
        excess = _relative_excess(spec, measured)
        constraints[spec.name] = excess
        if excess > 0:
            violations.append(Violation(spec, measured))
    return Evaluation(tuple(mean(s) for s in per_goal), per_goal[0], constraints, tuple(violations))


def failure_values(campaign: CampaignSpec) -> list[float]:
    """What a trial that served nothing scores on each objective: no throughput, endless latency.
    The samplers rank it by its violated constraint, not by these."""
    return [0.0 if goal.goal == "maximize" else math.inf for goal in campaign.goals]


def constraint_values(campaign: CampaignSpec, **violated: float) -> dict[str, float]:
    """Every constraint of the campaign met (0), but those ``violated`` by how much."""
    found = {PREFLIGHT: 0.0, LAUNCH: 0.0} | {spec.name: 0.0 for spec in campaign.subject_to}
    return found | violated
