"""Ranking with honesty: the feasible measured trials (every SLO met) ordered by the objective's
mean, best first, with 95 % intervals; each compared with the best by the rule every verdict uses
(``stats.compare_runs``: Welch's test with the floor between launches and hosts, and the practical
margin), so a winner within noise of the runner-up is called so, and one merely a launch's worth
ahead never "a clear winner". Trials that missed an SLO and trials that failed are listed apart.
An objective read once per trial (a latency percentile, goodput) has no interval: its trials are
ordered, not tested, and a difference under the margin is within noise all the same."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sglang_stacks.campaign.attributes import TrialRecord
from sglang_stacks.campaign.model_goals import ObjectiveSpec
from sglang_stacks.campaign.objective import describe, level_for, samples
from sglang_stacks.results.stats import BenchmarkResult, Difference, Noise, ci95, compare_runs, mean, p_text

__all__ = ["RankedTrial", "Ranking", "rank"]


@dataclass(frozen=True)
class RankedTrial:
    """One measured trial in the ranking."""

    rank: int
    stack: str
    labels: dict[str, str]
    host: str | None
    mean: float
    ci95: tuple[float, float]
    samples: tuple[float, ...]
    difference: Difference | None
    """Against the best; None for the best itself."""
    ttft_p50_ms: float | None
    stopped_early: str | None = None
    """Why it measured only its first repetitions (campaign ``early_stop``), or None."""
    tpot_p50_ms: float | None = None
    """The median time per output token at the objective's level: how fast each stream decodes (a
    prefill batched beside the decodes slows it; a decode worker of its own does not)."""

    @property
    def change_pct(self) -> float:
        """Its mean against the best's, in percent (0 for the best itself)."""
        return self.difference.change_pct if self.difference else 0.0

    @property
    def p_value(self) -> float | None:
        """The test's p against the best; None for the best, or when either has fewer than two
        samples (nothing to test)."""
        return self.difference.p_value if self.difference else None

    @property
    def within_noise(self) -> bool:
        """No difference a user cares about from the best (the best is within noise of itself)."""
        return self.difference is None or self.difference.within_noise

    @property
    def tested(self) -> bool:
        """Compared with the best by a test (both have at least two samples)."""
        return self.difference is None or self.difference.p_value is not None


@dataclass(frozen=True)
class Ranking:
    """The ranked trials, the failed ones, and the verdict in words."""

    objective: ObjectiveSpec
    trials: tuple[RankedTrial, ...]
    failed: tuple[TrialRecord, ...]
    missed_slo: tuple[TrialRecord, ...] = ()
    """Measured trials that missed an SLO constraint (their ``violations`` say by how much)."""
    noise: Noise = field(default_factory=Noise)
    """What every comparison allowed for: the floor between launches and hosts, the margin."""

    @property
    def winner(self) -> RankedTrial | None:
        return self.trials[0] if self.trials else None

    def within_noise_of_best(self) -> list[RankedTrial]:
        """The best and every trial not significantly different from it."""
        return [t for t in self.trials if t.within_noise]

    def verdict(self) -> str:
        """Who won and how sure that is, as sentences."""
        if not self.trials:
            return "No trial has been measured yet, so there is no winner."
        best = self.trials[0]
        what = describe(self.objective)
        head = f"{best.stack} ({_labels(best)}) leads at {best.mean:.1f} {what}"
        tied = self.within_noise_of_best()[1:]
        if len(self.trials) == 1:
            return head + "; it is the only measured trial, so nothing was compared."
        second = self.trials[1]
        if not tied and not second.tested:
            return (
                f"{head}, ahead of the runner-up {second.stack} ({second.change_pct:+.1f} %); each trial "
                "has one value of this objective, so the difference is not tested."
            )
        if not tied:
            assert second.difference is not None  # only the best has none
            return (
                f"{head}, significantly ahead of the runner-up {second.stack} "
                f"({second.change_pct:+.1f} %, {p_text(second.p_value)}, beyond the "
                f"{second.difference.margin_pct:.1f} % margin of launches and hosts): a clear winner."
            )
        names = ", ".join(f"{t.stack} ({_labels(t)}, {t.change_pct:+.1f} %, {_why(t)})" for t in tied)
        return (
            f"{head}, but it is within noise of {names}: the data do not separate them beyond what "
            f"launches and hosts alone make ({self.noise.launch_cv_pct:g} % between launches, a "
            f"{self.noise.margin_pct:.1f} % margin). Promote any of them, or measure them with more "
            "repetitions to tell them apart."
        )


def _why(trial: RankedTrial) -> str:
    return trial.difference.describe() if trial.difference else "the best"


def _labels(trial: RankedTrial) -> str:
    return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in trial.labels.items())


def _ttft(objective: ObjectiveSpec, levels: Sequence[BenchmarkResult]) -> float | None:
    ttft = level_for(objective.level, levels).ttft_ms
    return ttft.p50 if ttft else None


def _tpot(objective: ObjectiveSpec, levels: Sequence[BenchmarkResult]) -> float | None:
    tpot = level_for(objective.level, levels).tpot_ms
    return tpot.p50 if tpot else None


def rank(objective: ObjectiveSpec, records: Sequence[TrialRecord], noise: Noise | None = None) -> Ranking:
    """Order the feasible measured trials by mean objective, best first, each judged against the
    best with ``noise`` (default ``stats.Noise()``)."""
    noise = noise or Noise()
    measured = [r for r in records if r.status == "done" and r.levels and not r.violations]
    sign = 1.0 if objective.goal == "minimize" else -1.0
    scored = sorted(
        ((samples(objective, r.levels, r.gpus), r) for r in measured), key=lambda item: sign * mean(item[0])
    )
    ranked: list[RankedTrial] = []
    best_samples = scored[0][0] if scored else ()
    for number, (values, record) in enumerate(scored, start=1):
        first = number == 1
        ranked.append(
            RankedTrial(
                rank=number,
                stack=record.stack,
                labels=record.labels,
                host=record.host,
                mean=mean(values),
                ci95=ci95(values),
                samples=values,
                difference=None if first else compare_runs(values, best_samples, noise),
                ttft_p50_ms=_ttft(objective, record.levels),
                stopped_early=record.stopped_early,
                tpot_p50_ms=_tpot(objective, record.levels),
            )
        )
    failed = tuple(r for r in records if r.status == "failed")
    missed = tuple(r for r in records if r.status == "done" and r.violations)
    return Ranking(objective, tuple(ranked), failed, missed, noise)
