"""How one result's tok/s compares with a reference result's: the change in percent, whether
Welch's t-test on their runs calls it significant, and the sentence that says so.

``compare`` prints a ``StackVerdict`` for each stack; the regression gate decides with a
``GateVerdict``. Both come from here, so they never disagree on a number.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from sglang_stacks.errors import GateError, SpecError
from sglang_stacks.results.stats import ALPHA, BenchmarkResult, welch_t_test

__all__ = ["GateVerdict", "StackVerdict", "change_pct", "judge", "judge_gate"]


def change_pct(value: float, reference: float) -> float:
    """How far ``value`` is from ``reference``, in percent of ``reference`` (negative: lower)."""
    return (value - reference) / reference * 100.0


def _significance(p_value: float | None) -> str:
    """``significant, p<0.001``, ``not significant, p=0.298``, or why nothing can be said."""
    if p_value is None:
        return "significance unknown: fewer than two runs"
    word = "significant" if p_value < ALPHA else "not significant"
    return f"{word}, p<0.001" if p_value < 0.001 else f"{word}, p={p_value:.3f}"


class StackVerdict(BaseModel):
    """How one stack's tok/s compares with the reference stack's."""

    model_config = ConfigDict(frozen=True)

    stack: str
    reference: str
    tok_s: float
    reference_tok_s: float
    change_pct: float
    p_value: float | None
    significant: bool
    line: str


def judge(stack: str, result: BenchmarkResult, reference: str, base: BenchmarkResult) -> StackVerdict:
    """The verdict on ``stack``'s result against the ``reference`` stack's result ``base``."""
    change = change_pct(result.tok_s_mean, base.tok_s_mean) if base.tok_s_mean else 0.0
    test = welch_t_test(result.tok_s_runs, base.tok_s_runs)
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
        p_value=test.p_value,
        significant=test.significant(),
        line=f"{stack} is {relation} ({_significance(test.p_value)})",
    )


class GateVerdict(BaseModel):
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
) -> GateVerdict:
    """Pass unless ``candidate`` is slower than ``baseline`` by more than ``tolerance_pct`` percent."""
    if tolerance_pct < 0:
        raise SpecError(
            f"The gate tolerance is {tolerance_pct} %, but it must be 0 or more; set e.g. 5 for 5 %."
        )
    if baseline.tok_s_mean <= 0:
        raise GateError(
            f"{baseline_stack}'s recorded tok/s is {baseline.tok_s_mean}, so nothing can be gated "
            f"against it. Benchmark it again with `pulumi up -s {baseline_stack}`."
        )
    change = change_pct(candidate.tok_s_mean, baseline.tok_s_mean)
    p_value = welch_t_test(candidate.tok_s_runs, baseline.tok_s_runs).p_value
    passed = change >= -tolerance_pct
    measured = (
        f"{candidate_stack} ran at {candidate.tok_s_mean:.1f} tok/s, {abs(change):.1f} % "
        f"{'slower' if change < 0 else 'faster'} than {baseline_stack}'s {baseline.tok_s_mean:.1f} tok/s "
        f"({_significance(p_value)})"
    )
    if passed:
        message = f"{measured}, within the {tolerance_pct:g} % tolerance."
    else:
        message = (
            f"{measured}, beyond the {tolerance_pct:g} % tolerance. Roll back with "
            f"`pulumi up -s {baseline_stack}`, or raise the gate tolerance if this is expected."
        )
    return GateVerdict(
        passed=passed,
        candidate_tok_s=candidate.tok_s_mean,
        baseline_tok_s=baseline.tok_s_mean,
        change_pct=round(change, 2),
        tolerance_pct=tolerance_pct,
        p_value=p_value,
        message=message,
    )
