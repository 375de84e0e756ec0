"""How one result's tok/s compares with a reference result's: the change in percent, whether it is
a difference a user cares about (``stats.compare_runs``: Welch's test with the launch floor, and the
practical margin) or within noise, and the sentence that says so.

``compare`` prints a ``StackVerdict`` for each stack; the regression gate decides with a
``GateVerdict``; a fleet's canary gate with a ``CanaryVerdict``. All come from here, so they never
disagree on a number.
"""

from __future__ import annotations

from pydantic import ConfigDict

from sglang_stacks.errors import GateError, SpecError
from sglang_stacks.results.stats import BenchmarkResult, Noise, compare_runs
from sglang_stacks.shape import Shape

__all__ = [
    "CanaryVerdict",
    "GateVerdict",
    "StackVerdict",
    "change_pct",
    "judge",
    "judge_canary",
    "judge_gate",
    "unjudged_canary",
]


def change_pct(value: float, reference: float) -> float:
    """How far ``value`` is from ``reference``, in percent of ``reference`` (negative: lower)."""
    return (value - reference) / reference * 100.0


class StackVerdict(Shape):
    """How one stack's tok/s compares with the reference stack's."""

    model_config = ConfigDict(frozen=True)

    stack: str
    reference: str
    tok_s: float
    reference_tok_s: float
    change_pct: float
    p_value: float | None
    """Welch's two-sided p, the launch floor in each mean's variance (``stats.compare_runs``)."""
    significant: bool
    """A difference a user cares about: significant and at least the practical margin."""
    margin_pct: float
    """The practical margin: a smaller difference is within noise."""
    line: str


def judge(
    stack: str, result: BenchmarkResult, reference: str, base: BenchmarkResult, noise: Noise | None = None
) -> StackVerdict:
    """The verdict on ``stack``'s result against the ``reference`` stack's result ``base``."""
    difference = compare_runs(result.tok_s_runs, base.tok_s_runs, noise)
    change = difference.change_pct
    if round(change, 1) == 0.0:
        relation = f"as fast as {reference}"
    else:
        relation = f"{abs(change):.1f} % {'slower' if change < 0 else 'faster'} than {reference}"
    return StackVerdict(
        stack=stack,
        reference=reference,
        tok_s=result.tok_s_mean,
        reference_tok_s=base.tok_s_mean,
        change_pct=round(change, 2),
        p_value=difference.p_value,
        significant=difference.significant,
        margin_pct=round(difference.margin_pct, 2),
        line=f"{stack} is {relation} ({difference.describe()})",
    )


class GateVerdict(Shape):
    """The regression gate's decision about a candidate result against its baseline's."""

    model_config = ConfigDict(frozen=True)

    passed: bool
    candidate_tok_s: float
    baseline_tok_s: float
    change_pct: float
    tolerance_pct: float
    p_value: float | None
    message: str
    """Both numbers, the change and the tolerance, as a sentence (with the fix when it failed)."""


def judge_gate(
    candidate: BenchmarkResult,
    baseline: BenchmarkResult,
    tolerance_pct: float,
    *,
    candidate_stack: str = "this stack",
    baseline_stack: str = "the baseline",
    noise: Noise | None = None,
) -> GateVerdict:
    """Pass unless ``candidate`` is slower than ``baseline`` by more than ``tolerance_pct`` percent
    and the practical margin, significantly (``Difference.below``): a slowdown within noise passes."""
    if tolerance_pct < 0:
        raise SpecError(
            f"The gate tolerance is {tolerance_pct} %, but it must be 0 or more; set e.g. 5 for 5 %."
        )
    if baseline.tok_s_mean <= 0:
        raise GateError(
            f"{baseline_stack}'s recorded tok/s is {baseline.tok_s_mean}, so nothing can be gated "
            f"against it. Benchmark it again with `pulumi up -s {baseline_stack}`."
        )
    difference = compare_runs(candidate.tok_s_runs, baseline.tok_s_runs, noise)
    change = difference.change_pct
    passed = not difference.below(tolerance_pct)
    measured = (
        f"{candidate_stack} ran at {candidate.tok_s_mean:.1f} tok/s, {abs(change):.1f} % "
        f"{'slower' if change < 0 else 'faster'} than {baseline_stack}'s {baseline.tok_s_mean:.1f} tok/s "
        f"({difference.describe()})"
    )
    if not passed:
        message = (
            f"{measured}, beyond the {tolerance_pct:g} % tolerance. Roll back with "
            f"`pulumi up -s {baseline_stack}`, or raise the gate tolerance if this is expected."
        )
    elif change < -tolerance_pct:
        message = f"{measured}: beyond the {tolerance_pct:g} % tolerance but within noise, so it passes."
    else:
        message = f"{measured}, within the {tolerance_pct:g} % tolerance."
    return GateVerdict(
        passed=passed,
        candidate_tok_s=candidate.tok_s_mean,
        baseline_tok_s=baseline.tok_s_mean,
        change_pct=round(change, 2),
        tolerance_pct=tolerance_pct,
        p_value=difference.p_value,
        message=message,
    )


class CanaryVerdict(Shape):
    """The canary gate's decision about a fleet's canary against a replica on the current
    configuration, both measured the same way at the same moment (see `judge_canary`).

    Fields that may be None default to it: Pulumi drops null values from output maps.
    """

    model_config = ConfigDict(frozen=True)

    passed: bool
    line: str
    """The verdict as a sentence: both tok/s with their intervals, the change, its significance."""
    canary_tok_s: float | None = None
    """Mean over the canary's runs; None when nothing was measured (nothing to judge)."""
    canary_tok_s_ci95: tuple[float, float] | None = None
    reference_url: str | None = None
    """The replica the canary was measured beside; None when there was none to judge against."""
    reference_tok_s: float | None = None
    reference_tok_s_ci95: tuple[float, float] | None = None
    change_pct: float | None = None
    """The canary's tok/s against the reference's, in percent of the reference (negative: slower)."""
    change_ci95_pct: tuple[float, float] | None = None
    """95 % confidence interval of ``change_pct`` (Welch's interval of the difference of means)."""
    p_value: float | None = None
    """Welch's two-sided p-value of the canary's runs against the reference's."""
    tok_s_tolerance_pct: float | None = None
    problems: tuple[str, ...] = ()
    """What regressed, one sentence each (empty when it passed)."""
    measurements: int | None = None
    """Side-by-side measurements pooled into the verdict, when more than one (the gate measures
    again while the verdict is unsettled); None: one, as every verdict before the gate did."""

    @property
    def unsettled(self) -> bool:
        """Passed, though the change's 95 % interval reaches past the tok/s tolerance: the runs
        neither show a regression nor rule one out."""
        tolerance, interval = self.tok_s_tolerance_pct, self.change_ci95_pct
        return self.passed and tolerance is not None and interval is not None and interval[0] < -tolerance


def _interval(low_high: tuple[float, float], digits: int = 1) -> str:
    low, high = low_high
    return f"{low:.{digits}f} to {high:.{digits}f}"


def unjudged_canary(reason: str) -> CanaryVerdict:
    """The verdict when there is nothing to judge the canary against (``reason`` says why)."""
    return CanaryVerdict(passed=True, line=f"not judged: {reason}")


def judge_canary(
    canary: BenchmarkResult,
    reference: BenchmarkResult,
    *,
    reference_url: str,
    tok_s_tolerance_pct: float | None,
    ttft_tolerance_pct: float | None,
    noise: Noise | None = None,
    measurements: int = 1,
) -> CanaryVerdict:
    """The canary regressed when its tok/s is below the reference's by more than the tolerance and
    the practical margin, significantly (``Difference.below``), or its median TTFT is above the
    reference's by more than its tolerance.

    Both results must come from measurements of both replicas side by side, under the same
    conditions (``measurements`` of them, pooled); the test (with the floor between hosts) keeps
    the noise of two short benchmarks from holding a neutral change back, the tolerance keeps a
    real but small change from doing so.
    """
    difference = compare_runs(canary.tok_s_runs, reference.tok_s_runs, noise)
    change = difference.change_pct
    interval = difference.change_ci95_pct
    said = [f"95 % CI {_interval(interval)} %"] if interval else []
    said.append(difference.describe())
    measured = (
        f"canary {canary.tok_s_mean:.1f} tok/s (95 % CI {_interval(canary.tok_s_ci95)}) against "
        f"{reference.tok_s_mean:.1f} tok/s (95 % CI {_interval(reference.tok_s_ci95)}) on {reference_url}, "
        f"{change:+.1f} % ({', '.join(said)})"
    )
    if measurements > 1:
        measured += f", {canary.repetitions} runs a side over {measurements} measurements"
    problems: list[str] = []
    if tok_s_tolerance_pct is not None and difference.below(tok_s_tolerance_pct):
        problems.append(f"{measured}, beyond the {tok_s_tolerance_pct:g} % tolerance")
    elif tok_s_tolerance_pct is not None and change < -tok_s_tolerance_pct:
        measured += f", beyond the {tok_s_tolerance_pct:g} % tolerance but within noise"
    elif tok_s_tolerance_pct is not None:
        measured += f", within the {tok_s_tolerance_pct:g} % tolerance"
    if ttft_tolerance_pct is not None and canary.ttft_ms and reference.ttft_ms:
        ceiling = reference.ttft_ms.p50 * (1 + ttft_tolerance_pct / 100)
        if canary.ttft_ms.p50 > ceiling:
            problems.append(
                f"median TTFT {canary.ttft_ms.p50:.1f} ms against {reference.ttft_ms.p50:.1f} ms "
                f"(tolerance {ttft_tolerance_pct:g} %)"
            )
    return CanaryVerdict(
        passed=not problems,
        line="; ".join(problems) if problems else measured,
        canary_tok_s=canary.tok_s_mean,
        canary_tok_s_ci95=canary.tok_s_ci95,
        reference_url=reference_url,
        reference_tok_s=reference.tok_s_mean,
        reference_tok_s_ci95=reference.tok_s_ci95,
        change_pct=change,
        change_ci95_pct=interval,
        p_value=difference.p_value,
        tok_s_tolerance_pct=tok_s_tolerance_pct,
        problems=tuple(problems),
        measurements=measurements if measurements > 1 else None,
    )
