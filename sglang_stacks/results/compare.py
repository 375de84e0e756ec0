"""Compare stacks: launch flags side by side, metrics with change and significance, a verdict each.

Inputs are stack outputs as ``pulumi stack output --json`` prints them; the first stack is the
reference every other one is measured against.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from pydantic import ConfigDict

from sglang_stacks.config.flags import FlagValue
from sglang_stacks.config.render import show_value
from sglang_stacks.errors import SpecError, StacksError
from sglang_stacks.exits import ExitCode
from sglang_stacks.results.compared import Compared, read_compared
from sglang_stacks.results.stats import BenchmarkResult, Noise
from sglang_stacks.results.verdict import StackVerdict, change_pct, judge
from sglang_stacks.shape import Shape

__all__ = [
    "Comparison",
    "FlagRow",
    "MetricRow",
    "compare",
    "format_table",
    "main_compare",
    "to_json",
]


class FlagRow(Shape):
    """One launch flag across the compared stacks."""

    model_config = ConfigDict(frozen=True)

    flag: str
    """The option, as the stack's release spells it."""
    values: dict[str, FlagValue | None]
    """Each stack's value, typed as launched; None where the stack does not set the flag."""
    differs: bool


class MetricRow(Shape):
    """One metric across the stacks, with each stack's change in percent against the first."""

    model_config = ConfigDict(frozen=True)

    metric: str
    higher_is_better: bool
    values: dict[str, float | None]
    change_pct: dict[str, float | None]


class Comparison(Shape):
    """Everything ``compare`` found, ready to print or to dump as JSON."""

    model_config = ConfigDict(frozen=True)

    stacks: tuple[str, ...]
    sglang_versions: dict[str, str]
    all_flags: bool
    flags: tuple[FlagRow, ...]
    metrics: tuple[MetricRow, ...]
    tok_s_ci95: dict[str, tuple[float, float]]
    verdicts: tuple[StackVerdict, ...]
    notes: tuple[str, ...]
    tolerance_pct: float
    exit_code: int
    """0: no stack is slower than the first beyond the tolerance; 1: one is, significantly."""


def _change_pct(value: float | None, reference: float | None) -> float | None:
    if value is None or reference is None or reference == 0:
        return None
    return round(change_pct(value, reference), 4)


def _metrics(results: Mapping[str, BenchmarkResult]) -> tuple[MetricRow, ...]:
    extractors: list[tuple[str, bool, Callable[[BenchmarkResult], float | None]]] = [
        ("tok/s", True, lambda r: r.tok_s_mean),
        ("TTFT p50 ms", False, lambda r: r.ttft_ms.p50 if r.ttft_ms else None),
        ("TTFT p99 ms", False, lambda r: r.ttft_ms.p99 if r.ttft_ms else None),
        ("TPOT p50 ms", False, lambda r: r.tpot_ms.p50 if r.tpot_ms else None),
        ("ITL p50 ms", False, lambda r: r.itl_ms.p50 if r.itl_ms else None),
        ("ITL p99 ms", False, lambda r: r.itl_ms.p99 if r.itl_ms else None),
        ("E2E p99 ms", False, lambda r: r.e2e_ms.p99 if r.e2e_ms else None),
        ("goodput tok/s", True, lambda r: r.goodput.tok_s if r.goodput else None),
        ("goodput req/s", True, lambda r: r.goodput.req_s if r.goodput else None),
        ("cost per 1M tok", False, lambda r: r.cost_per_mtok),
        ("accept length", True, lambda r: r.accept_length),
        ("errors", False, lambda r: float(r.errors)),
    ]
    # Goodput, cost and E2E need an SLO, a price or a newer result; when no stack has them their
    # rows are left out rather than shown empty.
    optional = {"E2E p99 ms", "goodput tok/s", "goodput req/s", "cost per 1M tok"}
    extractors = [
        e for e in extractors if e[0] not in optional or any(e[2](r) is not None for r in results.values())
    ]
    reference = next(iter(results.values()))
    rows = []
    for name, higher_is_better, extract in extractors:
        values = {stack: extract(result) for stack, result in results.items()}
        rows.append(
            MetricRow(
                metric=name,
                higher_is_better=higher_is_better,
                values=values,
                change_pct={stack: _change_pct(v, extract(reference)) for stack, v in values.items()},
            )
        )
    return tuple(rows)


def _workload_notes(results: Mapping[str, BenchmarkResult]) -> tuple[str, ...]:
    (first, base), *others = results.items()
    notes = []
    for stack, result in others:
        for field in ("input_len", "output_len", "concurrency", "request_rate"):
            mine, theirs = getattr(result, field), getattr(base, field)
            if mine != theirs:
                notes.append(
                    f"{stack} was benchmarked with {field} {mine} and {first} with {theirs}: "
                    "their numbers are not directly comparable; benchmark both with the same workload."
                )
    return tuple(notes)


def _validated(outputs_by_stack: Mapping[str, Mapping[str, Any]]) -> dict[str, Compared]:
    if len(outputs_by_stack) < 2:
        raise SpecError(
            f"compare needs at least two stacks, got {len(outputs_by_stack)} "
            f"({', '.join(outputs_by_stack) or 'none'}); name the reference stack first, then the others."
        )
    return {stack: read_compared(stack, outputs) for stack, outputs in outputs_by_stack.items()}


def compare(
    outputs_by_stack: Mapping[str, Mapping[str, Any]],
    *,
    all_flags: bool = False,
    tolerance_pct: float = 0.0,
    noise: Noise | None = None,
) -> Comparison:
    """Compare every stack with the first: flags, metrics, significance and verdicts (``noise``:
    the launch floor and practical margin every verdict allows for; default ``stats.Noise()``).

    ``tolerance_pct`` sets the exit code: 1 when a stack is significantly slower than the first by
    more than this many percent (and the margin), else 0.
    """
    if tolerance_pct < 0:
        raise SpecError(f"tolerance_pct is {tolerance_pct}, but it must be 0 or more; pass e.g. 5 for 5 %.")
    parsed = _validated(outputs_by_stack)
    stacks = tuple(parsed)
    shown = {stack: o.flags for stack, o in parsed.items()}
    names: dict[str, None] = {}
    for flags in shown.values():
        names.update(dict.fromkeys(flags))
    flag_rows = []
    for name in names:
        values = {stack: shown[stack].get(name) for stack in stacks}
        differs = len({json.dumps(v) for v in values.values()}) > 1
        if differs or all_flags:
            flag_rows.append(FlagRow(flag=name, values=values, differs=differs))
    results = {stack: o.benchmark for stack, o in parsed.items()}
    reference = stacks[0]
    verdicts = tuple(judge(s, results[s], reference, results[reference], noise) for s in stacks[1:])
    regressed = any(v.significant and v.change_pct < -tolerance_pct for v in verdicts)
    return Comparison(
        stacks=stacks,
        sglang_versions={stack: o.sglang_version for stack, o in parsed.items()},
        all_flags=all_flags,
        flags=tuple(flag_rows),
        metrics=_metrics(results),
        tok_s_ci95={stack: result.tok_s_ci95 for stack, result in results.items()},
        verdicts=verdicts,
        notes=_workload_notes(results),
        tolerance_pct=tolerance_pct,
        exit_code=ExitCode.REGRESSION if regressed else ExitCode.OK,
    )


def _flag_cell(value: FlagValue | None) -> str:
    return "-" if value is None else show_value(value)


def _metric_cell(row: MetricRow, stack: str, is_reference: bool) -> str:
    value = row.values[stack]
    if value is None:
        return "-"
    text = f"{value:.0f}" if row.metric == "errors" else f"{value:.2f}" if value < 10 else f"{value:.1f}"
    change = row.change_pct[stack]
    if not is_reference and change is not None:
        text += f" ({change:+.1f} %)"
    return text


def _aligned(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def format_table(comparison: Comparison) -> str:
    """The comparison as text: flags side by side, metrics with changes, notes and verdicts."""
    stacks = list(comparison.stacks)
    flag_title = "flag" if comparison.all_flags else "flag (differences only)"
    flag_rows = [[flag_title, *stacks], ["sglang version", *(comparison.sglang_versions[s] for s in stacks)]]
    flag_rows += [[row.flag, *(_flag_cell(row.values[s]) for s in stacks)] for row in comparison.flags]
    lines = _aligned(flag_rows)
    if not comparison.flags:
        lines.append("(the launch flags are identical)")
    metric_rows = [["metric", *stacks]]
    for row in comparison.metrics:
        metric_rows.append([row.metric, *(_metric_cell(row, s, i == 0) for i, s in enumerate(stacks))])
        if row.metric == "tok/s":
            intervals = (comparison.tok_s_ci95[s] for s in stacks)
            metric_rows.append(["tok/s 95 % CI", *(f"{low:.1f}-{high:.1f}" for low, high in intervals)])
    lines += ["", *_aligned(metric_rows)]
    if comparison.notes:
        lines += ["", *(f"note: {note}" for note in comparison.notes)]
    lines += ["", *(verdict.line for verdict in comparison.verdicts)]
    return "\n".join(lines)


def to_json(comparison: Comparison) -> str:
    """The comparison as one JSON document for scripts."""
    return comparison.model_dump_json(indent=2)


def main_compare(
    stacks: Sequence[str],
    outputs_loader: Callable[[str], Mapping[str, Any]],
    json_out: bool = False,
    *,
    all_flags: bool = False,
    tolerance_pct: float = 0.0,
    noise: Noise | None = None,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    """The ``compare`` command: print the table (or JSON) and return the exit code for CI."""
    if len(set(stacks)) != len(stacks):
        print(f"compare: a stack is named twice in {list(stacks)}; name each stack once.", file=err)
        return ExitCode.BAD_INPUT
    try:
        comparison = compare(
            {stack: outputs_loader(stack) for stack in stacks},
            all_flags=all_flags,
            tolerance_pct=tolerance_pct,
            noise=noise,
        )
    except StacksError as exc:
        print(f"compare: {exc}", file=err)
        return ExitCode.BAD_INPUT
    print(to_json(comparison) if json_out else format_table(comparison), file=out)
    return comparison.exit_code
