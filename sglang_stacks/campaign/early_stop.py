"""Early stop (campaign ``early_stop``): a candidate clearly worse than the best after its first
repetitions is not given more.

Such a trial runs in two updates of its stack: the first measures ``after_repetitions``; the
server stays up and, unless the candidate is clearly worse, the second measures the rest of the
workload's repetitions, whose runs join the first's. Clearly worse: the 95 % interval of its mean
lies wholly below the 95 % interval of the best trial measured in full so far. With no such trial
yet (the first trials, or all hosts busy with their first), every candidate gets all repetitions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sglang_stacks.campaign.model import ObjectiveSpec
from sglang_stacks.campaign.objective import samples
from sglang_stacks.campaign.state import TrialRecord
from sglang_stacks.results.stats import BenchmarkResult, ci95, mean, stdev

__all__ = ["clearly_worse", "merge_levels"]


def _best_full(
    objective: ObjectiveSpec, records: Sequence[TrialRecord]
) -> tuple[str, tuple[float, ...]] | None:
    full = [
        (r.stack, samples(objective, r.levels))
        for r in records
        if r.status in ("measured", "done") and r.levels and r.stopped_early is None
    ]
    return max(full, key=lambda item: mean(item[1])) if full else None


def clearly_worse(
    objective: ObjectiveSpec,
    first: Sequence[Mapping[str, Any]],
    records: Sequence[TrialRecord],
    total_repetitions: int,
) -> str | None:
    """Why the trial whose first levels are ``first`` stops here, or None when it goes on."""
    best = _best_full(objective, records)
    if best is None:
        return None
    values = samples(objective, first)
    low, high = ci95(values)
    best_low, best_high = ci95(best[1])
    if high >= best_low:
        return None
    return (
        f"after {len(values)} of {total_repetitions} repetitions its 95 % interval "
        f"({low:.1f} to {high:.1f}) lies below the best's ({best[0]}: {best_low:.1f} to {best_high:.1f})"
    )


def merge_levels(
    first: Sequence[Mapping[str, Any]], rest: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The two updates' levels as one result per concurrency: their runs joined, the mean, spread
    and interval computed over all of them; latencies from the second update (the larger one)."""
    earlier = {BenchmarkResult.model_validate(level).concurrency: level for level in first}
    merged: list[dict[str, Any]] = []
    for level in rest:
        later = BenchmarkResult.model_validate(level)
        before = earlier.get(later.concurrency)
        if before is None:
            merged.append(dict(level))
            continue
        prior = BenchmarkResult.model_validate(before)
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
        merged.append(joined.model_dump(mode="json"))
    return merged
