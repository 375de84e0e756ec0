"""Early stop (campaign ``early_stop``): a candidate clearly worse than the best after its first
repetitions is not given more, decided by an Optuna pruner so it works under every strategy.

Such a trial runs in two updates of its stack: the first measures ``after_repetitions``, whose
per-repetition values of the first objective are reported to the trial as its intermediate
values; the server stays up and, unless the pruner says the trial is clearly worse, the second
measures the rest of the workload's repetitions, whose runs join the first's. Clearly worse: worse
than the best feasible trial measured in full so far by a difference a user cares about, by the
rule every verdict uses (``stats.compare_runs``: significant with the floor between launches and
hosts, and at least the practical margin). With no such trial yet (the first trials, or all hosts
busy with their first), every candidate gets all repetitions.
"""

from __future__ import annotations

from collections.abc import Sequence

import optuna
from optuna.pruners import BasePruner
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from sglang_stacks.campaign.attributes import suggested
from sglang_stacks.results.stats import BenchmarkResult, Noise, ci95, compare_runs, mean, p_text, stdev

__all__ = ["IntervalPruner", "clearly_worse", "merge_levels"]


def clearly_worse(
    values: Sequence[float],
    best: tuple[str, Sequence[float]],
    total_repetitions: int,
    minimize: bool = False,
    noise: Noise | None = None,
) -> str | None:
    """Why a trial whose first repetitions measured ``values`` stops, given the best full trial
    (its name and values), or None when it goes on."""
    difference = compare_runs(values, best[1], noise)
    worse = difference.change_pct > 0 if minimize else difference.change_pct < 0
    if not (worse and difference.significant):
        return None
    side = "above" if minimize else "below"
    return (
        f"after {len(values)} of {total_repetitions} repetitions its mean {mean(values):.1f} is "
        f"{abs(difference.change_pct):.1f} % {side} the best's ({best[0]}: {mean(best[1]):.1f}; "
        f"{p_text(difference.p_value)}, beyond the {difference.margin_pct:.1f} % margin)"
    )


def _values(trial: FrozenTrial) -> list[float]:
    return [value for _, value in sorted(trial.intermediate_values.items())]


class IntervalPruner(BasePruner):
    """Prunes a trial whose reported repetitions are clearly worse (``clearly_worse``) than the best
    full trial's (complete, feasible, with at least two repetitions reported)."""

    def __init__(self, total_repetitions: int, noise: Noise | None = None) -> None:
        self.total_repetitions = total_repetitions
        self.noise = noise

    def _best(self, study: optuna.Study) -> tuple[str, list[float]] | None:
        minimize = study.direction == StudyDirection.MINIMIZE
        full = [
            (attributes.stack if (attributes := suggested(study, t)) else f"trial {t.number}", _values(t))
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if len(t.intermediate_values) >= 2 and all(v <= 0 for v in t.constraints.values())
        ]
        if not full:
            return None
        pick = min if minimize else max
        return pick(full, key=lambda item: mean(item[1]))

    def reason(self, study: optuna.Study, trial: FrozenTrial) -> str | None:
        """Why ``trial`` stops here, or None when it goes on."""
        best = self._best(study)
        if best is None:
            return None
        minimize = study.direction == StudyDirection.MINIMIZE
        return clearly_worse(_values(trial), best, self.total_repetitions, minimize, self.noise)

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        return self.reason(study, trial) is not None


def merge_levels(first: Sequence[BenchmarkResult], rest: Sequence[BenchmarkResult]) -> list[BenchmarkResult]:
    """The two updates' levels as one result per concurrency: their runs joined, the mean, spread
    and interval computed over all of them; latencies from the second update (the larger one)."""
    earlier = {level.concurrency: level for level in first}
    merged: list[BenchmarkResult] = []
    for later in rest:
        prior = earlier.get(later.concurrency)
        if prior is None:
            merged.append(later)
            continue
        runs = (*prior.tok_s_runs, *later.tok_s_runs)
        joined = later.model_copy(
            update={
                "repetitions": prior.repetitions + later.repetitions,
                "tok_s_runs": runs,
                "tok_s_mean": mean(runs),
                "tok_s_stdev": stdev(runs),
                "tok_s_ci95": ci95(runs),
                "requests": prior.requests + later.requests,
                "errors": prior.errors + later.errors,
            }
        )
        merged.append(joined)
    return merged
