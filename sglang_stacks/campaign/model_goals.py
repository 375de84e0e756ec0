"""What a campaign optimises and bounds (``objective``/``objectives`` and ``subject_to`` in its
file): a metric read at a load level, maximised or minimised, or kept within an SLO bound; and how
much a measured difference must be to count (``noise``).
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, model_validator

from sglang_stacks.config.docstrings import FileSection
from sglang_stacks.results.stats import LAUNCH_CV_PCT, Noise

__all__ = ["METRICS", "ConstraintSpec", "Direction", "LoadLevel", "Metric", "NoiseSpec", "ObjectiveSpec"]

Metric = Literal[
    "tok_s",
    "tok_s_per_gpu",
    "tok_s_per_user",
    "goodput_tok_s",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p95_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p90_ms",
    "tpot_p95_ms",
    "tpot_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "e2e_p50_ms",
    "e2e_p90_ms",
    "e2e_p99_ms",
]
"""What a campaign can optimise or bound, read from one load level of a trial's benchmark: output
tok/s, per GPU the server uses (``tp_size``), per user (per stream: tok/s over the concurrency),
goodput (tok/s of requests within the workload's SLO), and latency percentiles in milliseconds."""
METRICS: tuple[str, ...] = get_args(Metric)

Direction = Literal["maximize", "minimize"]


class LoadLevel(FileSection):
    """One load level of the workload: a closed loop's ``concurrency`` or an open loop's
    ``request_rate``."""

    concurrency: int | None = Field(default=None, ge=1)
    """Concurrent streams (a level of ``workload.concurrency``)."""
    request_rate: float | None = Field(default=None, gt=0)
    """Requests per second (a level of ``workload.request_rate``)."""

    @model_validator(mode="after")
    def _one_level(self) -> LoadLevel:
        if (self.concurrency is None) == (self.request_rate is None):
            raise ValueError("a load level is one of concurrency: N or request_rate: R")
        return self

    def describe(self) -> str:
        """The level in words: ``concurrency 16`` or ``4 req/s``."""
        if self.concurrency is not None:
            return f"concurrency {self.concurrency}"
        return f"{self.request_rate:g} req/s"

    @property
    def key(self) -> str:
        """The level in a name: ``concurrency=16`` or ``rate=4``."""
        if self.concurrency is not None:
            return f"concurrency={self.concurrency}"
        return f"rate={self.request_rate:g}"


def _default_direction(metric: str) -> Direction:
    return "minimize" if metric.endswith("_ms") else "maximize"


class ObjectiveSpec(FileSection):
    """What the search optimises: a ``metric`` at a load level (``at``), maximised or minimised
    (latencies are minimised, everything else maximised, unless ``direction`` says otherwise)."""

    metric: Metric = "tok_s"
    """The measure: ``tok_s``, ``tok_s_per_gpu``, ``tok_s_per_user``, ``goodput_tok_s``, or a latency
    percentile such as ``ttft_p99_ms`` or ``tpot_p50_ms``."""
    direction: Direction | None = None
    """``maximize`` or ``minimize``; default: minimise latencies (``*_ms``), maximise the rest."""
    at: LoadLevel | None = None
    """The load level the metric is read at, like ``{concurrency: 16}``; default concurrency 1."""
    concurrency: int | None = Field(default=None, ge=1)
    """Shorthand for ``at: {concurrency: N}`` (the form of earlier campaign files)."""

    @model_validator(mode="after")
    def _one_level(self) -> ObjectiveSpec:
        if self.at is not None and self.concurrency is not None:
            raise ValueError("the objective has both at and concurrency; keep at: {concurrency: N} only")
        return self

    @property
    def level(self) -> LoadLevel:
        """The load level the objective reads."""
        if self.at is not None:
            return self.at
        return LoadLevel(concurrency=self.concurrency or 1)

    @property
    def goal(self) -> Direction:
        """Whether larger or smaller is better."""
        return self.direction or _default_direction(self.metric)

    @property
    def name(self) -> str:
        """The objective's name in the study: ``tok_s@concurrency=1``."""
        return f"{self.metric}@{self.level.key}"


class ConstraintSpec(FileSection):
    """A service-level objective a trial must meet to count: ``metric`` at a load level at most
    ``max`` (or at least ``min``). A trial that misses one is infeasible, shown with by how much."""

    metric: Metric
    """The bounded measure, like ``ttft_p99_ms`` or ``tok_s_per_user``."""
    at: LoadLevel
    """The load level it is read at, like ``{concurrency: 16}``."""
    max: float | None = None
    """The largest value allowed."""
    min: float | None = None
    """The smallest value allowed."""

    @model_validator(mode="after")
    def _one_bound(self) -> ConstraintSpec:
        if (self.max is None) == (self.min is None):
            raise ValueError(f"the constraint on {self.metric} needs exactly one of max and min")
        return self

    @property
    def name(self) -> str:
        """The constraint's name in the study: ``ttft_p99_ms@concurrency=16<=500``."""
        bound = f"<={self.max:g}" if self.max is not None else f">={self.min:g}"
        return f"{self.metric}@{self.at.key}{bound}"


class NoiseSpec(FileSection):
    """How much a configuration's result moves from one launch or pool host to another, and the
    smallest difference the ranking, its verdict and early stop call one (``stats.Noise``)."""

    launch_cv_pct: float = Field(default=LAUNCH_CV_PCT, ge=0, le=50)
    """The spread of a configuration's mean from one launch or host to another (coefficient of
    variation, percent), added to every comparison of two trials; the default is measured
    (docs/campaigns.md). Raise it for hosts that differ more (at 32 streams and above, real SGLang
    servers have measured about 2.5)."""
    min_effect_pct: float | None = Field(default=None, ge=0, le=100)
    """A smaller difference is within noise, however small its p-value; default: the difference two
    launches of one configuration stay within 95 % of the time at that floor."""

    def noise(self) -> Noise:
        """The noise every verdict of the campaign allows for."""
        return Noise(self.launch_cv_pct, self.min_effect_pct)
