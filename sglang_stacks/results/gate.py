"""The regression gate: after a benchmark, a stack that names a baseline must not be slower than
the baseline's last recorded tok/s (with the same workload) by more than its tolerance.

The gate only judges. Handing the host back to the baseline (``on_regression: hand_back``) is an
update of another stack, which ``sglang-stacks rollout`` runs after this stack's update failed.
"""

from __future__ import annotations

import os

from sglang_stacks.config.spec import GateSpec
from sglang_stacks.errors import GateError, RegressionError
from sglang_stacks.results import history
from sglang_stacks.results.stats import BenchmarkResult, Noise
from sglang_stacks.results.verdict import GateVerdict, judge_gate

__all__ = ["check", "evaluate"]


def evaluate(
    stack: str, result: BenchmarkResult, gate: GateSpec, db_path: str | os.PathLike[str]
) -> GateVerdict:
    """The gate's verdict on ``stack``'s ``result`` against its baseline's recorded result.

    Raises GateError when the baseline has no recorded result with the same workload.
    """
    recorded = _comparable_result(stack, result, gate.baseline_stack, db_path)
    return judge_gate(
        result,
        recorded,
        gate.tolerance_pct,
        candidate_stack=stack,
        baseline_stack=gate.baseline_stack,
        noise=Noise.declared(gate.launch_cv_pct),
    )


def check(stack: str, result: BenchmarkResult, gate: GateSpec, db_path: str | os.PathLike[str]) -> None:
    """Raises RegressionError with both numbers when ``result`` regressed past the gate."""
    verdict = evaluate(stack, result, gate, db_path)
    if verdict.passed:
        return
    measurements = (
        f"tok/s {verdict.candidate_tok_s:.1f} against {verdict.baseline_tok_s:.1f} "
        f"({verdict.change_pct:+.1f} %, tolerance {verdict.tolerance_pct:g} %)"
    )
    message = verdict.message
    if gate.on_regression == "hand_back":
        message += (
            " This stack hands the host back on a regression "
            f"(on_regression: hand_back) when deployed with `sglang-stacks rollout {stack}`, "
            f"which then deploys {gate.baseline_stack} again by itself."
        )
    raise RegressionError(message, measurements=measurements, stack=stack)


def _workload(result: BenchmarkResult) -> str:
    """The load a result was measured under, in words: two results compare only when these match."""
    lengths = f"input_len {result.input_len}, output_len {result.output_len}"
    if result.request_rate is not None:
        # An open-loop result's concurrency is only the most requests it saw in flight: its load is
        # the rate it sent at, never comparable with a closed loop's streams.
        return f"{lengths} at request rate {result.request_rate:g}/s"
    return f"{lengths} at concurrency {result.concurrency}"


def _comparable_result(
    stack: str, result: BenchmarkResult, baseline_stack: str, db_path: str | os.PathLike[str]
) -> BenchmarkResult:
    """The baseline's newest result measured with the same workload as ``result``."""
    recorded = history.rows(db_path, [baseline_stack])
    if not recorded:
        raise GateError(
            f"The gate compares {stack} with {baseline_stack}, which has no recorded benchmark yet. "
            f"Run `pulumi up -s {baseline_stack}` first, or remove the gate from this stack."
        )
    # Numbers from another prompt length, output length, concurrency or request rate say nothing
    # about a regression.
    same = [row.result for row in recorded if _workload(row.result) == _workload(result)]
    if not same:
        raise GateError(
            f"The gate compares {stack} with {baseline_stack}, but {baseline_stack} was benchmarked with "
            f"{_workload(recorded[-1].result)} and {stack} with {_workload(result)}, so their tok/s are "
            f"not comparable. Give both stacks the same sglang-stacks:benchmark workload and run "
            f"`pulumi up -s {baseline_stack}`, then this stack again."
        )
    return same[-1]
