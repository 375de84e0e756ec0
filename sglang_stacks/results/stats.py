"""Benchmark statistics: mean, spread, t-distribution confidence intervals, percentiles (the
quantiles and Welch's p-value from ``scipy.special``), and how two measured configurations compare
(``compare_runs``), the one rule of ``compare``, the gates, a campaign's ranking and its early stop.
Each result is a launch, often on its own host, whose mean carries an offset its repetitions cannot
show (a fresh server's graphs and memory layout, clocks, a neighbour's load): every comparison adds
that floor (``Noise.launch_cv_pct``) to each mean's variance, and calls a difference one only when
the test then rejects equal means and it reaches the practical margin (``Noise.margin_pct``).
``BenchmarkResult``: a load level's record, the ``benchmark`` output and a history row (``summary``).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ConfigDict, Field

from sglang_stacks.shape import Shape

__all__ = [
    "ALPHA",
    "LAUNCH_CV_PCT",
    "TOK_S_DECIMALS",
    "BenchmarkResult",
    "Difference",
    "Goodput",
    "Noise",
    "Percentiles",
    "Slo",
    "ci95",
    "compare_runs",
    "launch_margin_pct",
    "mean",
    "p_text",
    "percentile",
    "stdev",
    "tok_s_figure",
]

ALPHA = 0.05
"""A difference can be significant only when Welch's two-sided p-value is below this."""


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


@functools.cache
def _special() -> Any:
    """``scipy.special``, imported once, on first use: what ``scipy.stats`` computes with, 0.2 CPU-s
    instead of its 1.0 in each provider that summarises a benchmark. OpenBLAS gets one thread for the
    import unless the environment names a number; the processes this one starts keep theirs."""
    unset = "OPENBLAS_NUM_THREADS" not in os.environ
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        from scipy import special
    finally:
        if unset:
            del os.environ["OPENBLAS_NUM_THREADS"]
    return special


def ci95(values: Sequence[float]) -> tuple[float, float]:
    """95 % confidence interval of the mean (t-distribution); a point for fewer than two values."""
    centre = mean(values)
    if len(values) < 2:
        return (centre, centre)
    half = float(_special().stdtrit(len(values) - 1, 0.975)) * stdev(values) / math.sqrt(len(values))
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


LAUNCH_CV_PCT = 1.0
"""How much a configuration's mean tok/s moves from one launch (or host) to another, as a
coefficient of variation in percent: the default floor of every comparison. Real GPU hosts differ
by about 1 % (public SGLang figures: 0.1 to 0.3 % run to run at 1 to 16 streams); this project's
emulator hosts, measured by ``benchmarks/emulator_noise.py``, by 0.1 % on a loaded machine and 0.9 %
with two more busy processes on its two cores (docs/campaigns.md, "Verdicts and the noise floor")."""


def launch_margin_pct(launch_cv_pct: float) -> float:
    """The practical margin a floor gives: two launches of one configuration differ by less than
    this, in percent, 95 % of the time (``1.96 x sqrt(2) x launch_cv_pct``)."""
    return float(_special().ndtri(1 - ALPHA / 2)) * math.sqrt(2.0) * launch_cv_pct


@dataclass(frozen=True)
class Noise:
    """What a comparison of two measured configurations allows for beside their repetitions."""

    launch_cv_pct: float = LAUNCH_CV_PCT
    """The spread of a configuration's mean from one launch or host to another (CV, percent)."""
    min_effect_pct: float | None = None
    """The smallest difference worth a verdict, in percent; None: ``launch_margin_pct`` of the floor."""

    @classmethod
    def declared(cls, launch_cv_pct: float | None, min_effect_pct: float | None = None) -> Noise:
        """The noise a file declares, the default floor where it declares none."""
        return cls(LAUNCH_CV_PCT if launch_cv_pct is None else launch_cv_pct, min_effect_pct)

    @property
    def margin_pct(self) -> float:
        """The practical margin: a smaller difference is within noise, however small its p-value."""
        return launch_margin_pct(self.launch_cv_pct) if self.min_effect_pct is None else self.min_effect_pct


@dataclass(frozen=True)
class Difference:
    """How one result's runs compare with a reference result's, each from its own launch."""

    change_pct: float
    """Its mean against the reference's, in percent of the reference's (negative: lower)."""
    p_value: float | None
    """Welch's two-sided p with the launch floor in each mean's variance; None with fewer than two
    runs on a side (nothing to test)."""
    change_ci95_pct: tuple[float, float] | None
    """95 % interval of ``change_pct`` (Welch's degrees of freedom); None when untested."""
    margin_pct: float
    """The practical margin it was judged against."""

    @property
    def significant(self) -> bool:
        """A difference a user cares about: the test rejects equal means and it reaches the margin."""
        return self.p_value is not None and self.p_value < ALPHA and abs(self.change_pct) >= self.margin_pct

    @property
    def within_noise(self) -> bool:
        """No difference a user cares about: tested and not significant, or smaller than the margin."""
        return not self.significant and (self.p_value is not None or abs(self.change_pct) < self.margin_pct)

    def below(self, tolerance_pct: float) -> bool:
        """Lower than the reference by more than ``tolerance_pct`` and the margin, and significantly
        so (or beyond both with nothing to test): what fails a gate."""
        beyond = self.change_pct < -max(tolerance_pct, self.margin_pct)
        return beyond and (self.p_value is None or self.p_value < ALPHA)

    def describe(self) -> str:
        """The verdict in words: ``significant, p<0.001``, ``within noise, p=0.298``, or why not."""
        if self.p_value is None:
            if abs(self.change_pct) < self.margin_pct:
                return f"within noise: under the {self.margin_pct:.1f} % margin, one run on a side"
            return "significance unknown: fewer than two runs"
        p = p_text(self.p_value)
        if self.significant:
            return f"significant, {p}"
        if self.p_value < ALPHA:
            return f"within noise: {p}, under the {self.margin_pct:.1f} % margin"
        return f"within noise, {p}"


def compare_runs(runs: Sequence[float], reference: Sequence[float], noise: Noise | None = None) -> Difference:
    """How ``runs`` (one launch's repetitions) compare with ``reference`` (another launch's): Welch's
    test (as ``scipy.stats.ttest_ind_from_stats`` computes it) on their means, each mean's variance its runs'
    spread over their count plus the launch floor's share, ``(launch_cv x mean)^2``."""
    noise = noise or Noise()
    centre, base = mean(runs), mean(reference)
    change = (centre - base) / base * 100.0 if base else 0.0
    if len(runs) < 2 or len(reference) < 2:
        return Difference(change, None, None, noise.margin_pct)
    floor = noise.launch_cv_pct / 100.0
    var_runs = stdev(runs) ** 2 / len(runs) + (floor * centre) ** 2
    var_reference = stdev(reference) ** 2 / len(reference) + (floor * base) ** 2
    if var_runs + var_reference == 0.0:  # constant runs and no floor: equal or surely different
        point = (change, change)
        return Difference(change, 1.0 if change == 0.0 else 0.0, point, noise.margin_pct)
    # Welch's test as scipy's ttest_ind_from_stats(equal_var=False), on the exact sums (ttest_ind warned).
    statistic = (centre - base) / math.sqrt(var_runs + var_reference)
    df = (var_runs + var_reference) ** 2 / (
        var_runs**2 / (len(runs) - 1) + var_reference**2 / (len(reference) - 1)
    )
    p_value = float(2.0 * _special().stdtr(df, -abs(statistic)))
    half = float(_special().stdtrit(df, 1 - ALPHA / 2)) * math.sqrt(var_runs + var_reference)
    interval = (
        ((centre - base - half) / base * 100.0, (centre - base + half) / base * 100.0) if base else None
    )
    return Difference(change, p_value, interval, noise.margin_pct)


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


class Percentiles(Shape):
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


class Goodput(Shape):
    """Requests (and their tokens) per second that met the stack's SLO, mean over repetitions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    req_s: float = Field(description="requests per second within every limit")
    tok_s: float = Field(description="output tokens per second of those requests")
    pct: float = Field(description="share of measured requests within every limit, in percent")
    slo: dict[str, float] = Field(description="the limits: ttft_ms, tpot_ms, e2e_ms as declared")


class BenchmarkResult(Shape):
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
