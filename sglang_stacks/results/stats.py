"""Benchmark statistics: mean, spread, t-distribution confidence intervals, percentiles, Welch's t-test
(the t quantiles and the test from ``scipy.stats``).

``summarize_levels`` turns the load generator's JSON into a ``BenchmarkResult`` per concurrency
level: the flat, JSON-ready record that becomes the stack's ``benchmark`` output (the first
level's) and a row of the results history.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sglang_stacks.errors import BenchmarkError
from sglang_stacks.results.loadgen.contract import SCHEMA as LOADGEN_SCHEMA

__all__ = [
    "ALPHA",
    "BenchmarkResult",
    "Percentiles",
    "WelchTest",
    "ci95",
    "mean",
    "percentile",
    "stdev",
    "summarize_levels",
    "welch_t_test",
]

ALPHA = 0.05
"""A difference is significant when Welch's two-sided p-value is below this."""


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; ``ValueError`` for no values."""
    if not values:
        raise ValueError("mean of no values")
    return math.fsum(values) / len(values)


def stdev(values: Sequence[float]) -> float:
    """Sample standard deviation (n - 1); 0.0 for a single value."""
    if len(values) < 2:
        return 0.0
    centre = mean(values)
    return math.sqrt(math.fsum((v - centre) ** 2 for v in values) / (len(values) - 1))


def _scipy_stats() -> Any:
    """``scipy.stats``, imported on first use: it takes seconds, and most commands test nothing."""
    from scipy import stats

    return stats


def ci95(values: Sequence[float]) -> tuple[float, float]:
    """95 % confidence interval of the mean (t-distribution); a point for fewer than two values."""
    centre = mean(values)
    if len(values) < 2:
        return (centre, centre)
    half = float(_scipy_stats().t.ppf(0.975, len(values) - 1)) * stdev(values) / math.sqrt(len(values))
    return (centre - half, centre + half)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), interpolating linearly between the closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"q must be within 0..100, got {q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    below = math.floor(rank)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (rank - below)


@dataclass(frozen=True)
class WelchTest:
    """Welch's unequal-variance t-test of two samples' means."""

    t: float
    df: float
    p_value: float | None
    """Two-sided; ``None`` when a sample has fewer than two values, so nothing can be said."""

    def significant(self, alpha: float = ALPHA) -> bool:
        return self.p_value is not None and self.p_value < alpha


def welch_t_test(a: Sequence[float], b: Sequence[float]) -> WelchTest:
    """Whether the means of ``a`` and ``b`` differ more than their spread explains."""
    if len(a) < 2 or len(b) < 2:
        return WelchTest(t=0.0, df=0.0, p_value=None)
    var_a, var_b = stdev(a) ** 2 / len(a), stdev(b) ** 2 / len(b)
    difference = mean(a) - mean(b)
    if var_a + var_b == 0.0:
        # Two constant samples: identical means say nothing differs, different ones say it surely does.
        if difference == 0.0:
            return WelchTest(t=0.0, df=float(len(a) + len(b) - 2), p_value=1.0)
        return WelchTest(t=math.copysign(math.inf, difference), df=float(len(a) + len(b) - 2), p_value=0.0)
    test = _scipy_stats().ttest_ind(a, b, equal_var=False)
    return WelchTest(t=float(test.statistic), df=float(test.df), p_value=float(test.pvalue))


class Percentiles(BaseModel):
    """p50/p90/p99 of one latency, in milliseconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Percentiles | None:
        if not values:
            return None
        return cls(**{f"p{q}": round(percentile(values, q), 3) for q in (50, 90, 99)})


class BenchmarkResult(BaseModel):
    """One benchmark at one concurrency level: a stack output and a history row.

    Fields that may be None default to it: Pulumi drops null values from output maps, so a result
    read back from a stack lacks them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    concurrency: int = Field(ge=1, description="concurrent streams")
    input_len: int = Field(ge=1, description="prompt length asked for, in (about) tokens")
    output_len: int = Field(ge=1, description="tokens generated per request")
    repetitions: int = Field(ge=1, description="measured runs behind tok_s_runs")
    tok_s_mean: float = Field(description="output tokens per second, mean over runs")
    tok_s_stdev: float = Field(description="sample standard deviation over runs")
    tok_s_ci95: tuple[float, float] = Field(description="95 % confidence interval of the mean")
    tok_s_runs: tuple[float, ...] = Field(description="tok/s of each run")
    ttft_ms: Percentiles | None = Field(default=None, description="time to first token")
    tpot_ms: Percentiles | None = Field(default=None, description="time per output token after the first")
    itl_ms: Percentiles | None = Field(default=None, description="inter-token latency")
    accept_length: float | None = Field(
        default=None, description="tokens per verify step; None without speculation"
    )
    requests: int = Field(ge=0, description="measured requests")
    errors: int = Field(ge=0, description="measured requests that failed")


class _LoadgenLevel(BaseModel):
    model_config = ConfigDict(extra="ignore")

    concurrency: int
    tok_s_runs: list[float] = Field(min_length=1)
    requests: int
    errors: int
    spec_completion_tokens: int = 0
    spec_verify_ct: int = 0
    ttft_ms: list[float]
    tpot_ms: list[float]
    itl_ms: list[float]


class _LoadgenWorkload(BaseModel):
    model_config = ConfigDict(extra="ignore")

    input_len: int
    output_len: int


class _LoadgenDocument(BaseModel):
    model_config = ConfigDict(extra="ignore")

    schema_: str = Field(alias="schema")
    workload: _LoadgenWorkload
    levels: list[_LoadgenLevel] = Field(min_length=1)


def _parse(loadgen_json: Mapping[str, Any] | str) -> _LoadgenDocument:
    fix = "Re-run the benchmark with the load generator shipped with this version of sglang-stacks."
    try:
        raw = json.loads(loadgen_json) if isinstance(loadgen_json, str) else dict(loadgen_json)
        document = _LoadgenDocument.model_validate(raw)
    except json.JSONDecodeError as exc:
        raise BenchmarkError(f"The load generator printed no JSON document ({exc}). {fix}") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise BenchmarkError(
            f"The load generator's output is not usable at {where!r}: {first['msg']}. {fix}"
        ) from exc
    if document.schema_ != LOADGEN_SCHEMA:
        raise BenchmarkError(
            f"The load generator's output has schema {document.schema_!r}, expected {LOADGEN_SCHEMA!r}. {fix}"
        )
    return document


def _result(level: _LoadgenLevel, workload: _LoadgenWorkload) -> BenchmarkResult:
    low, high = ci95(level.tok_s_runs)
    accept = None
    if level.spec_verify_ct > 0:
        accept = round(level.spec_completion_tokens / level.spec_verify_ct, 4)
    return BenchmarkResult(
        concurrency=level.concurrency,
        input_len=workload.input_len,
        output_len=workload.output_len,
        repetitions=len(level.tok_s_runs),
        tok_s_mean=round(mean(level.tok_s_runs), 3),
        tok_s_stdev=round(stdev(level.tok_s_runs), 3),
        tok_s_ci95=(round(low, 3), round(high, 3)),
        tok_s_runs=tuple(level.tok_s_runs),
        ttft_ms=Percentiles.of(level.ttft_ms),
        tpot_ms=Percentiles.of(level.tpot_ms),
        itl_ms=Percentiles.of(level.itl_ms),
        accept_length=accept,
        requests=level.requests,
        errors=level.errors,
    )


def summarize_levels(loadgen_json: Mapping[str, Any] | str) -> tuple[BenchmarkResult, ...]:
    """One ``BenchmarkResult`` per concurrency level of a load generator run, in run order."""
    document = _parse(loadgen_json)
    return tuple(_result(level, document.workload) for level in document.levels)
