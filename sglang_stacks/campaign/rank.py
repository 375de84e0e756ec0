"""Ranking with honesty: trials ordered by the objective's mean with 95 % intervals; each compared
with the best by Welch's t-test; a winner within noise of the runner-up is called so."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sglang_stacks.campaign.model import ObjectiveSpec
from sglang_stacks.campaign.objective import describe, level_for, samples
from sglang_stacks.campaign.state import TrialRecord
from sglang_stacks.results.stats import ALPHA, ci95, mean, welch_t_test
from sglang_stacks.results.verdict import change_pct

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
    change_pct: float
    """Against the best (0 for the best itself)."""
    p_value: float | None
    """Welch's two-sided p against the best; None for the best, or with fewer than two samples."""
    ttft_p50_ms: float | None
    stopped_early: str | None = None
    """Why it measured only its first repetitions (campaign ``early_stop``), or None."""

    @property
    def within_noise(self) -> bool:
        """Not significantly different from the best (the best is within noise of itself)."""
        return self.p_value is None or self.p_value >= ALPHA


@dataclass(frozen=True)
class Ranking:
    """The ranked trials, the failed ones, and the verdict in words."""

    objective: ObjectiveSpec
    trials: tuple[RankedTrial, ...]
    failed: tuple[TrialRecord, ...]

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
        if not tied:
            second = self.trials[1]
            return (
                f"{head}, significantly ahead of the runner-up {second.stack} "
                f"({second.change_pct:+.1f} %, p={_p(second.p_value)}): a clear winner."
            )
        names = ", ".join(f"{t.stack} ({_labels(t)}, {t.change_pct:+.1f} %, p={_p(t.p_value)})" for t in tied)
        return (
            f"{head}, but it is within noise of {names}: the data do not separate them. "
            "Promote any of them, or measure them with more repetitions to tell them apart."
        )


def _p(p_value: float | None) -> str:
    return "n/a" if p_value is None else ("<0.001" if p_value < 0.001 else f"{p_value:.3f}")


def _labels(trial: RankedTrial) -> str:
    return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in trial.labels.items())


def _ttft(objective: ObjectiveSpec, levels: list[dict[str, Any]]) -> float | None:
    ttft = level_for(objective.level, levels).ttft_ms
    return ttft.p50 if ttft else None


def rank(objective: ObjectiveSpec, records: list[TrialRecord]) -> Ranking:
    """Order the measured trials by mean objective, best first, each judged against the best."""
    measured = [r for r in records if r.status in ("measured", "done") and r.levels]
    scored = sorted(((samples(objective, r.levels), r) for r in measured), key=lambda item: -mean(item[0]))
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
                change_pct=0.0 if first else change_pct(mean(values), mean(best_samples)),
                p_value=None if first else welch_t_test(values, best_samples).p_value,
                ttft_p50_ms=_ttft(objective, record.levels),
                stopped_early=record.stopped_early,
            )
        )
    failed = tuple(r for r in records if r.status == "failed")
    return Ranking(objective, tuple(ranked), failed)
