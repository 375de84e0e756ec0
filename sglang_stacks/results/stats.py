"""Benchmark statistics: mean, spread, t-distribution confidence intervals, percentiles, Welch's t-test.

``summarize`` turns the load generator's JSON into a ``BenchmarkResult``, the flat, JSON-ready
record that becomes the stack's ``benchmark`` output and a row of the results history.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sglang_stacks.errors import BenchmarkError

__all__ = [
    "LOADGEN_SCHEMA",
    "BenchmarkResult",
    "Percentiles",
    "WelchTest",
    "ci95",
    "mean",
    "percentile",
    "regularized_incomplete_beta",
    "stdev",
    "summarize",
    "summarize_levels",
    "t_cdf",
    "t_quantile",
    "t_two_sided_p",
    "welch_t_test",
]

LOADGEN_SCHEMA = "sglang-stacks.loadgen/1"


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


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function, evaluated by Lentz's method."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return result


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the CDF of the Beta(a, b) distribution at ``x``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    # The fraction converges fast only on one side of the mean; use the symmetry on the other.
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = t_two_sided_p(t, df) / 2.0
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``t`` with P(T <= t) = ``p``; ``t_quantile(0.975, 4)`` is 2.776."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be strictly between 0 and 1, got {p}")
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, high * 2.0
    for _ in range(200):
        middle = (low + high) / 2.0
        if t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
        if high - low < 1e-12 * max(1.0, high):
            break
    return (low + high) / 2.0


def ci95(values: Sequence[float]) -> tuple[float, float]:
    """95 % confidence interval of the mean (t-distribution); a point for fewer than two values."""
    centre = mean(values)
    if len(values) < 2:
        return (centre, centre)
    half = t_quantile(0.975, len(values) - 1) * stdev(values) / math.sqrt(len(values))
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

    def significant(self, alpha: float = 0.05) -> bool:
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
    t = difference / math.sqrt(var_a + var_b)
    df = (var_a + var_b) ** 2 / (var_a**2 / (len(a) - 1) + var_b**2 / (len(b) - 1))
    return WelchTest(t=t, df=df, p_value=t_two_sided_p(t, df))


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


def summarize(loadgen_json: Mapping[str, Any] | str, concurrency: int | None = None) -> BenchmarkResult:
    """The result at ``concurrency``, by default the first level run (single stream unless configured).

    ``loadgen_json`` is the document the load generator printed, parsed or as text.
    """
    results = summarize_levels(loadgen_json)
    if concurrency is None:
        return results[0]
    for result in results:
        if result.concurrency == concurrency:
            return result
    levels = ", ".join(str(r.concurrency) for r in results)
    raise BenchmarkError(
        f"The benchmark has no run at concurrency {concurrency}; it ran {levels}. "
        "Ask for one of those, or add the level to the stack's benchmark concurrency list."
    )
