"""What a campaign optimises and bounds, read from a trial's benchmark levels.

A metric at a load level turns the levels a trial measured into samples: one per repetition for
throughputs (``tok_s``, per GPU, per user), whose mean and interval the ranking compares, or one
value for what the load generator reports over the whole level (goodput, latency percentiles).
Each ``Metric`` maps to one reader here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sglang_stacks.campaign.model_goals import METRICS, LoadLevel, ObjectiveSpec
from sglang_stacks.errors import BenchmarkError
from sglang_stacks.results.stats import BenchmarkResult, Percentiles

__all__ = ["READERS", "describe", "level_for", "measure", "samples", "unit"]

Reader = Callable[[BenchmarkResult, int], tuple[float, ...]]
"""A metric's samples from one level's result and the GPUs the server uses."""


def level_for(level: LoadLevel, levels: Sequence[BenchmarkResult]) -> BenchmarkResult:
    """The benchmark level at ``level`` (its concurrency, or its request rate)."""
    for result in levels:
        if level.request_rate is not None and result.request_rate == level.request_rate:
            return result
        if (
            level.concurrency is not None
            and result.request_rate is None
            and result.concurrency == level.concurrency
        ):
            return result
    measured = ", ".join(
        f"{r.request_rate:g} req/s" if r.request_rate is not None else f"concurrency {r.concurrency}"
        for r in levels
    )
    raise BenchmarkError(
        f"The trial measured {measured or 'no level'}, not {level.describe()}. Add that level to the "
        "campaign's workload (concurrency or request_rate)."
    )


def _tok_s(result: BenchmarkResult, gpus: int) -> tuple[float, ...]:
    return result.tok_s_runs


def _per_gpu(result: BenchmarkResult, gpus: int) -> tuple[float, ...]:
    return tuple(run / gpus for run in result.tok_s_runs)


def _per_user(result: BenchmarkResult, gpus: int) -> tuple[float, ...]:
    users = result.concurrency if result.request_rate is None else (result.concurrency_measured or 1.0)
    return tuple(run / max(users, 1e-9) for run in result.tok_s_runs)


def _goodput(result: BenchmarkResult, gpus: int) -> tuple[float, ...]:
    if result.goodput is None:
        raise BenchmarkError(
            "goodput_tok_s needs the workload's SLO: set workload.slo (ttft_ms, tpot_ms or e2e_ms) in the "
            "campaign file."
        )
    return (result.goodput.tok_s,)


def _percentile(name: str) -> Reader:
    latency, quantile = name.removesuffix("_ms").split("_")

    def read(result: BenchmarkResult, gpus: int) -> tuple[float, ...]:
        found: Percentiles | None = getattr(result, f"{latency}_ms")
        value = getattr(found, quantile) if found is not None else None
        if value is None:
            raise BenchmarkError(
                f"The trial's result has no {quantile} of {latency} (its benchmark recorded none); pick "
                "another metric or measure again."
            )
        return (float(value),)

    return read


READERS: dict[str, Reader] = {
    "tok_s": _tok_s,
    "tok_s_per_gpu": _per_gpu,
    "tok_s_per_user": _per_user,
    "goodput_tok_s": _goodput,
    **{name: _percentile(name) for name in METRICS if name.endswith("_ms")},
}
"""Metric -> its samples from one level's result."""


def measure(
    metric: str, level: LoadLevel, levels: Sequence[BenchmarkResult], gpus: int = 1
) -> tuple[float, ...]:
    """The samples of ``metric`` at ``level`` of a trial's levels: one per repetition for
    throughputs, one value for goodput and latencies."""
    return READERS[metric](level_for(level, levels), gpus)


def samples(objective: ObjectiveSpec, levels: Sequence[BenchmarkResult], gpus: int = 1) -> tuple[float, ...]:
    """The objective's samples of a trial."""
    return measure(objective.metric, objective.level, levels, gpus)


_UNITS = {
    "tok_s_per_gpu": "tok/s per GPU",
    "tok_s_per_user": "tok/s per user",
    "goodput_tok_s": "goodput tok/s",
}


def unit(metric: str) -> str:
    """The metric's unit in words: ``tok/s``, ``tok/s per GPU``, ``ms``."""
    return "ms" if metric.endswith("_ms") else _UNITS.get(metric, "tok/s")


def describe(objective: ObjectiveSpec) -> str:
    """The objective in words, for tables and plots: ``tok/s at concurrency 1``, ``ttft p99 ms at
    concurrency 16``."""
    metric = objective.metric
    what = metric.removesuffix("_ms").replace("_", " ") + " ms" if metric.endswith("_ms") else unit(metric)
    return f"{what} at {objective.level.describe()}"
