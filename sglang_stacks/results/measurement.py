"""A benchmark's document becomes results in one step: the load generator's document summarised per
load level (its tok/s rounded there, once), the first level recorded in the results history, and
judged by the stack's regression gate. The benchmark's provider calls this once per measurement
(`record`), and once to apply a new price or gate to a kept result (`rejudge`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sglang_loadgen.document import Document
from sglang_stacks.config.benchmark_spec import SloSpec
from sglang_stacks.config.spec import GateSpec
from sglang_stacks.results import gate as regression_gate
from sglang_stacks.results import history, summary
from sglang_stacks.results.stats import BenchmarkResult, Slo

__all__ = ["Measured", "record", "rejudge"]


@dataclass(frozen=True)
class Measured:
    """What was measured, and where it came from: the history keeps these beside the numbers."""

    stack: str
    flags_digest: str
    sglang_version: str
    launch_command: str


def record(
    measured: Measured,
    document: Document,
    *,
    slo: SloSpec | None,
    host_price_per_hour: float | None,
    gate: GateSpec | None,
    db_path: Path | None = None,
) -> tuple[BenchmarkResult, ...]:
    """The results of ``document``, one per load level; the first is recorded in the history, then
    judged by ``gate`` (RegressionError: recorded first, a regression stays in the history, where
    ``sglang-stacks rollout`` finds it)."""
    limits = Slo(**slo.model_dump(exclude_none=True)) if slo else None
    levels = summary.summarize_levels(document, slo=limits, gpu_hour_price=host_price_per_hour)
    db = db_path or history.default_history_path()
    history.record(
        db, measured.stack, measured.flags_digest, measured.sglang_version, measured.launch_command, levels[0]
    )
    if gate:
        regression_gate.check(measured.stack, levels[0], gate, db)
    return levels


def rejudge(
    stack: str,
    levels: Sequence[BenchmarkResult],
    *,
    host_price_per_hour: float | None,
    gate: GateSpec | None,
    db_path: Path | None = None,
) -> tuple[BenchmarkResult, ...]:
    """Results already measured, priced anew and judged by ``gate``: no GPU time."""
    priced = tuple(
        level.model_copy(
            update={"cost_per_mtok": summary.cost_per_mtok(host_price_per_hour, level.tok_s_mean)}
        )
        for level in levels
    )
    if gate:
        regression_gate.check(stack, priced[0], gate, db_path or history.default_history_path())
    return priced
