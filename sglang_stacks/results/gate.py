"""The regression gate: after a benchmark, a stack that names a baseline must not be slower than
the baseline's last recorded tok/s by more than its tolerance; optionally the host goes back to
the baseline at once.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sglang_stacks.errors import BenchmarkError
from sglang_stacks.results import compare, history
from sglang_stacks.results.stats import BenchmarkResult

HAND_BACK_TIMEOUT_S = 3600.0


def check(stack: str, result: BenchmarkResult, gate: Mapping[str, Any], db_path: Path) -> None:
    """Raises BenchmarkError with both numbers when `result` regressed past the gate.

    With `on_regression: hand_back` the baseline stack is deployed again first, so its server
    serves when this update fails.
    """
    baseline_stack = str(gate["baseline_stack"])
    recorded = _comparable_result(stack, result, baseline_stack, db_path)
    verdict = compare.gate(
        result,
        recorded,
        float(gate["tolerance_pct"]),
        candidate_stack=stack,
        baseline_stack=baseline_stack,
    )
    if verdict.passed:
        return
    if gate.get("on_regression") == "hand_back":
        hand_back(baseline_stack)
        raise BenchmarkError(
            f"{verdict.message} The host was handed back: {baseline_stack} is serving again."
        )
    verdict.raise_for_failure()


def _workload(result: BenchmarkResult) -> str:
    return f"input_len {result.input_len}, output_len {result.output_len} at concurrency {result.concurrency}"


def _comparable_result(
    stack: str, result: BenchmarkResult, baseline_stack: str, db_path: Path
) -> BenchmarkResult:
    """The baseline's newest result measured with the same workload as `result`."""
    recorded = history.rows(db_path, [baseline_stack])
    if not recorded:
        raise BenchmarkError(
            f"The gate compares {stack} with {baseline_stack}, which has no recorded benchmark yet. "
            f"Run `pulumi up -s {baseline_stack}` first, or remove the gate from this stack."
        )
    # Numbers from another prompt length, output length or concurrency say nothing about a regression.
    same = [row.result for row in recorded if _workload(row.result) == _workload(result)]
    if not same:
        raise BenchmarkError(
            f"The gate compares {stack} with {baseline_stack}, but {baseline_stack} was benchmarked with "
            f"{_workload(recorded[-1].result)} and {stack} with {_workload(result)}, so their tok/s are "
            f"not comparable. Give both stacks the same sglang-stacks:benchmark workload and run "
            f"`pulumi up -s {baseline_stack}`, then this stack again."
        )
    return same[-1]


def hand_back(baseline_stack: str) -> None:
    """Deploys the baseline stack again (`pulumi up`), which takes the host back from this one."""
    result = subprocess.run(
        ["pulumi", "up", "--yes", "--skip-preview", "--non-interactive", "-s", baseline_stack],
        cwd=os.getcwd(),
        capture_output=True,
        text=True,
        timeout=HAND_BACK_TIMEOUT_S,
        check=False,
    )
    if result.returncode != 0:
        lines = (result.stdout + result.stderr).strip().splitlines()[-15:]
        raise BenchmarkError(
            f"Handing the host back to {baseline_stack} failed (exit {result.returncode}):\n"
            + "\n".join(lines)
            + f"\nRun `pulumi up -s {baseline_stack}` yourself."
        )
