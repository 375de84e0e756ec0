"""Benchmark statistics: mean, spread, t-distribution confidence intervals, percentiles, Welch's t-test
(the t quantiles and the test from ``scipy.stats``).

``BenchmarkResult`` is the flat, JSON-ready record of one load level that becomes the stack's
``benchmark`` output and a row of the results history; ``summary`` builds it from the load
generator's document.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ALPHA",
    "TOK_S_DECIMALS",
    "BenchmarkResult",
    "Goodput",
    "Percentiles",
    "Slo",
    "WelchTest",
    "ci95",
    "mean",
    "p_text",
    "percentile",
    "stdev",
    "tok_s_figure",
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
    difference: float = 0.0
    """The first sample's mean minus the second's."""
    difference_ci95: tuple[float, float] | None = None
    """95 % confidence interval of ``difference`` (Welch's degrees of freedom); ``None`` with
    fewer than two values in a sample."""

    def significant(self, alpha: float = ALPHA) -> bool:
        return self.p_value is not None and self.p_value < alpha


def welch_t_test(a: Sequence[float], b: Sequence[float]) -> WelchTest:
    """Whether the means of ``a`` and ``b`` differ more than their spread explains, and by how much."""
    if len(a) < 2 or len(b) < 2:
        return WelchTest(t=0.0, df=0.0, p_value=None, difference=mean(a) - mean(b) if a and b else 0.0)
    var_a, var_b = stdev(a) ** 2 / len(a), stdev(b) ** 2 / len(b)
    difference = mean(a) - mean(b)
    if var_a + var_b == 0.0:
        # Two constant samples: identical means say nothing differs, different ones say it surely does.
        df = float(len(a) + len(b) - 2)
        point = (difference, difference)
        if difference == 0.0:
            return WelchTest(t=0.0, df=df, p_value=1.0, difference=0.0, difference_ci95=point)
        t = math.copysign(math.inf, difference)
        return WelchTest(t=t, df=df, p_value=0.0, difference=difference, difference_ci95=point)
    scipy_stats = _scipy_stats()
    # From the samples' mean and spread as computed above (exact sums): scipy's ttest_ind computes
    # them again and warns of precision loss whenever a sample is constant, as a steady server's
    # tok/s runs, rounded to 0.01, can be.
    test = scipy_stats.ttest_ind_from_stats(
        mean(a), stdev(a), len(a), mean(b), stdev(b), len(b), equal_var=False
    )
    df = (var_a + var_b) ** 2 / (var_a**2 / (len(a) - 1) + var_b**2 / (len(b) - 1))  # Welch-Satterthwaite
    half = float(scipy_stats.t.ppf(0.975, df)) * math.sqrt(var_a + var_b)
    return WelchTest(
        t=float(test.statistic),
        df=df,
        p_value=float(test.pvalue),
        difference=difference,
        difference_ci95=(difference - half, difference + half),
    )


def p_text(p_value: float | None) -> str:
    """A p-value as a reader sees it: ``p<0.001``, ``p=0.042``, or ``p n/a`` when nothing was tested."""
    if p_value is None:
        return "p n/a"
    return "p<0.001" if p_value < 0.001 else f"p={p_value:.3f}"


TOK_S_DECIMALS = 2
"""tok/s figures are kept to 0.01 tok/s: far below the run-to-run noise of any server."""


def tok_s_figure(value: float) -> float:
    """A tok/s figure as a result records it: rounded once, when the result is made from the load
    generator's document (whose numbers are exact); the stack outputs, the history and ``compare``
    show it as it is."""
    return round(value, TOK_S_DECIMALS)


class Percentiles(BaseModel):
    """p50/p90/p95/p99 of one latency, in milliseconds (p95 is None in results recorded before it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    p50: float
    p90: float
    p95: float | None = None
    p99: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Percentiles | None:
        if not values:
            return None
        return cls(**{f"p{q}": round(percentile(values, q), 3) for q in (50, 90, 95, 99)})


@dataclass(frozen=True)
class Slo:
    """Per-request limits a request must meet to count towards goodput; None is no limit."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    def met(self, ttft_ms: float, tpot_ms: float | None, e2e_ms: float) -> bool:
        """Whether one request stayed within every declared limit."""
        return (
            (self.ttft_ms is None or ttft_ms <= self.ttft_ms)
            and (self.tpot_ms is None or tpot_ms is None or tpot_ms <= self.tpot_ms)
            and (self.e2e_ms is None or e2e_ms <= self.e2e_ms)
        )


class Goodput(BaseModel):
    """Requests (and their tokens) per second that met the stack's SLO, mean over repetitions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    req_s: float = Field(description="requests per second within every limit")
    tok_s: float = Field(description="output tokens per second of those requests")
    pct: float = Field(description="share of measured requests within every limit, in percent")
    slo: dict[str, float] = Field(description="the limits: ttft_ms, tpot_ms, e2e_ms as declared")


class BenchmarkResult(BaseModel):
    """One benchmark at one load level: a stack output and a history row.

    Fields that may be None default to it: Pulumi drops null values from output maps, so a result
    read back from a stack lacks them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    concurrency: int = Field(ge=1, description="concurrent streams (open loop: the most requests in flight)")
    request_rate: float | None = Field(default=None, description="open loop: requests per second sent")
    input_len: int = Field(ge=1, description="prompt tokens per request as the server counted them")
    output_len: int = Field(ge=1, description="tokens generated per request")
    repetitions: int = Field(ge=1, description="measured runs behind tok_s_runs")
    tok_s_mean: float = Field(description="output tokens per second, mean over runs")
    tok_s_stdev: float = Field(description="sample standard deviation over runs")
    tok_s_ci95: tuple[float, float] = Field(description="95 % confidence interval of the mean")
    tok_s_runs: tuple[float, ...] = Field(description="tok/s of each run")
    ttft_ms: Percentiles | None = Field(default=None, description="time to first token")
    tpot_ms: Percentiles | None = Field(default=None, description="time per output token after the first")
    itl_ms: Percentiles | None = Field(default=None, description="inter-token latency")
    e2e_ms: Percentiles | None = Field(default=None, description="end-to-end latency of a request")
    concurrency_measured: float | None = Field(default=None, description="mean requests in flight")
    goodput: Goodput | None = Field(default=None, description="throughput within the declared SLO")
    cost_per_mtok: float | None = Field(
        default=None, description="price of a million output tokens at tok_s_mean, from the host's price"
    )
    accept_length: float | None = Field(
        default=None, description="tokens per verify step; None without speculation"
    )
    requests: int = Field(ge=0, description="measured requests")
    errors: int = Field(ge=0, description="measured requests that failed")
