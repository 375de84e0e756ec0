"""Compare stacks (flags side by side, metrics with change and significance, a verdict) and gate regressions.

Inputs are stack outputs as ``pulumi stack output --json`` prints them; the first stack is the
reference every other one is measured against.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from components.errors import BenchmarkError, SpecError, StacksError
from components.stats import BenchmarkResult, welch_t_test
from sglang_flags import FlagTable, known_releases, load_table

__all__ = [
    "ALPHA",
    "EXIT_BAD_INPUT",
    "EXIT_OK",
    "EXIT_REGRESSION",
    "Comparison",
    "FlagRow",
    "FlagValue",
    "GateVerdict",
    "MetricRow",
    "StackOutputs",
    "StackVerdict",
    "compare",
    "format_table",
    "gate",
    "main_compare",
    "parse_argv",
    "read_stack_outputs",
    "to_json",
]

ALPHA = 0.05
"""A difference is significant when Welch's two-sided p-value is below this."""

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT = 0, 1, 2

FlagValue = str | bool | None
"""A flag's value: its text, ``True`` for a switch that is present, ``None`` when absent."""


class StackOutputs(BaseModel):
    """The stack outputs a comparison reads; any others are ignored.

    The launch flags come from ``launch_argv`` (a list), else ``launch_flags`` (``--flag`` ->
    value, ``True`` for a switch, a list for several values), else ``launch_command`` (one string).
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    launch_argv: tuple[str, ...] | None = None
    launch_flags: dict[str, str | int | float | bool | list[str | int | float]] | None = None
    launch_command: str | None = None
    sglang_version: str
    benchmark: BenchmarkResult

    @model_validator(mode="after")
    def _has_flags(self) -> StackOutputs:
        if self.launch_argv is None and self.launch_flags is None and self.launch_command is None:
            raise ValueError("none of the outputs launch_argv, launch_flags or launch_command is set")
        return self

    def argv(self) -> list[str]:
        """The launch command as argv, from whichever output the stack has."""
        if self.launch_argv is not None:
            return list(self.launch_argv)
        if self.launch_flags is not None:
            argv: list[str] = []
            for option, value in self.launch_flags.items():
                if value is False:
                    continue
                argv.append(option)
                if value is not True:
                    argv.extend(str(v) for v in (value if isinstance(value, list) else [value]))
            return argv
        return shlex.split(self.launch_command or "")


class FlagRow(BaseModel):
    """One launch flag across the compared stacks."""

    model_config = ConfigDict(frozen=True)

    flag: str
    values: dict[str, FlagValue]
    differs: bool


class MetricRow(BaseModel):
    """One metric across the stacks, with each stack's change in percent against the first."""

    model_config = ConfigDict(frozen=True)

    metric: str
    higher_is_better: bool
    values: dict[str, float | None]
    change_pct: dict[str, float | None]


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


class Comparison(BaseModel):
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

    def raise_for_failure(self) -> None:
        """Raise ``BenchmarkError`` with the message when the gate failed."""
        if not self.passed:
            raise BenchmarkError(self.message)


def _table_for(release: str | None) -> FlagTable | None:
    """The flag table of ``release``; a build without its own table (``0.5.8+cu128``) reads its x.y.z's."""
    if release in known_releases():
        return load_table(release)
    found = re.match(r"\d+\.\d+\.\d+", release or "")
    if found is None or found.group() not in known_releases():
        return None
    return load_table(found.group())


def _resolve(option: str, table: FlagTable | None) -> tuple[str, bool | None, bool]:
    """Canonical spelling of ``option``, whether it takes a value (None: unknown), and if it takes many."""
    if table is None:
        return option, None, False
    flag = table.by_option(option)
    if flag is None:
        # argparse accepts an unambiguous prefix; resolve it the same way.
        matches = {f for f in table.flags for o in f.flags if o.startswith(option)}
        flag = matches.pop() if len(matches) == 1 else None
    if flag is None:
        return option, None, False
    return flag.long_name, flag.takes_value, flag.nargs in ("+", "*") or isinstance(flag.nargs, int)


def parse_argv(argv: Sequence[str], release: str | None = None) -> dict[str, FlagValue]:
    """Launch flags of an argv as ``{"--flag": value}``; switches map to ``True``.

    Everything before the first ``--`` option is the program (``python -m sglang.launch_server``).
    With a known ``release`` the flag table decides which options take values and spells aliases
    and prefixes canonically; otherwise a token that is not an option is the previous one's value.
    """
    table = _table_for(release)
    flags: dict[str, FlagValue] = {}
    index = next((i for i, token in enumerate(argv) if token.startswith("--")), len(argv))
    while index < len(argv):
        token = argv[index]
        index += 1
        if not token.startswith("--"):
            continue  # a stray value; argparse would reject it, the comparison just skips it
        option, _, inline = token.partition("=")
        name, takes_value, many = _resolve(option, table)
        if inline or "=" in token:
            flags[name] = inline
            continue
        values: list[str] = []
        while index < len(argv) and not argv[index].startswith("--") and takes_value is not False:
            values.append(argv[index])
            index += 1
            if not many and takes_value is True:
                break
        flags[name] = " ".join(values) if values else True
    return flags


def _change_pct(value: float | None, reference: float | None) -> float | None:
    if value is None or reference is None or reference == 0:
        return None
    return round((value - reference) / reference * 100.0, 4)


def _format_p(p_value: float | None) -> str:
    if p_value is None:
        return "significance unknown: fewer than two runs"
    word = "significant" if p_value < ALPHA else "not significant"
    return f"{word}, p<0.001" if p_value < 0.001 else f"{word}, p={p_value:.3f}"


def _verdict(stack: str, result: BenchmarkResult, reference: str, base: BenchmarkResult) -> StackVerdict:
    change = (result.tok_s_mean - base.tok_s_mean) / base.tok_s_mean * 100.0 if base.tok_s_mean else 0.0
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
        significant=test.significant(ALPHA),
        line=f"{stack} is {relation} ({_format_p(test.p_value)})",
    )


def _metrics(results: Mapping[str, BenchmarkResult]) -> tuple[MetricRow, ...]:
    extractors: list[tuple[str, bool, Callable[[BenchmarkResult], float | None]]] = [
        ("tok/s", True, lambda r: r.tok_s_mean),
        ("TTFT p50 ms", False, lambda r: r.ttft_ms.p50 if r.ttft_ms else None),
        ("TTFT p99 ms", False, lambda r: r.ttft_ms.p99 if r.ttft_ms else None),
        ("TPOT p50 ms", False, lambda r: r.tpot_ms.p50 if r.tpot_ms else None),
        ("ITL p50 ms", False, lambda r: r.itl_ms.p50 if r.itl_ms else None),
        ("ITL p99 ms", False, lambda r: r.itl_ms.p99 if r.itl_ms else None),
        ("accept length", True, lambda r: r.accept_length),
        ("errors", False, lambda r: float(r.errors)),
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
        for field in ("input_len", "output_len", "concurrency"):
            mine, theirs = getattr(result, field), getattr(base, field)
            if mine != theirs:
                notes.append(
                    f"{stack} was benchmarked with {field} {mine} and {first} with {theirs}: "
                    "their numbers are not directly comparable; benchmark both with the same workload."
                )
    return tuple(notes)


def _validated(outputs_by_stack: Mapping[str, Mapping[str, Any]]) -> dict[str, StackOutputs]:
    if len(outputs_by_stack) < 2:
        raise SpecError(
            f"compare needs at least two stacks, got {len(outputs_by_stack)} "
            f"({', '.join(outputs_by_stack) or 'none'}); name the reference stack first, then the others."
        )
    parsed = {}
    for stack, outputs in outputs_by_stack.items():
        if not outputs:
            raise SpecError(
                f"Stack {stack!r} has no outputs: it was never deployed, or it was destroyed. Run "
                f"`pulumi up -s {stack}` so it is deployed and benchmarked, then compare again."
            )
        try:
            parsed[stack] = StackOutputs.model_validate(outputs)
        except ValidationError as exc:
            first = exc.errors()[0]
            key = ".".join(str(part) for part in first["loc"])
            what = f"output {key!r} is not usable" if key else "outputs are not usable"
            reason = str(first["msg"]).removeprefix("Value error, ")
            raise SpecError(
                f"Stack {stack!r} {what}: {reason}. Run `pulumi up -s {stack}` so the stack is deployed "
                "and benchmarked, then compare again."
            ) from exc
    return parsed


def compare(
    outputs_by_stack: Mapping[str, Mapping[str, Any]], *, all_flags: bool = False, tolerance_pct: float = 0.0
) -> Comparison:
    """Compare every stack with the first: flags, metrics, significance and verdicts.

    ``tolerance_pct`` sets the exit code: 1 when a stack is significantly slower than the first by
    more than this many percent, else 0.
    """
    if tolerance_pct < 0:
        raise SpecError(f"tolerance_pct is {tolerance_pct}, but it must be 0 or more; pass e.g. 5 for 5 %.")
    parsed = _validated(outputs_by_stack)
    stacks = tuple(parsed)
    argvs = {stack: parse_argv(o.argv(), o.sglang_version) for stack, o in parsed.items()}
    names: dict[str, None] = {}
    for flags in argvs.values():
        names.update(dict.fromkeys(flags))
    flag_rows = []
    for name in names:
        values = {stack: argvs[stack].get(name) for stack in stacks}
        differs = len({json.dumps(v) for v in values.values()}) > 1
        if differs or all_flags:
            flag_rows.append(FlagRow(flag=name, values=values, differs=differs))
    results = {stack: o.benchmark for stack, o in parsed.items()}
    reference = stacks[0]
    verdicts = tuple(_verdict(s, results[s], reference, results[reference]) for s in stacks[1:])
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
        exit_code=EXIT_REGRESSION if regressed else EXIT_OK,
    )


def _flag_cell(value: FlagValue) -> str:
    if value is None:
        return "-"
    if value is True:
        return "(set)"
    return str(value)


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


def gate(
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
        raise BenchmarkError(
            f"{baseline_stack}'s recorded tok/s is {baseline.tok_s_mean}, so nothing can be gated "
            f"against it. Benchmark it again with `pulumi up -s {baseline_stack}`."
        )
    change = (candidate.tok_s_mean - baseline.tok_s_mean) / baseline.tok_s_mean * 100.0
    p_value = welch_t_test(candidate.tok_s_runs, baseline.tok_s_runs).p_value
    passed = change >= -tolerance_pct
    measured = (
        f"{candidate_stack} ran at {candidate.tok_s_mean:.1f} tok/s, {abs(change):.1f} % "
        f"{'slower' if change < 0 else 'faster'} than {baseline_stack}'s {baseline.tok_s_mean:.1f} tok/s "
        f"({_format_p(p_value)})"
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


def read_stack_outputs(stack: str, *, cwd: str | None = None) -> dict[str, Any]:
    """One stack's outputs via ``pulumi stack output --json`` (secrets stay hidden)."""
    argv = ["pulumi", "stack", "output", "--json", "--show-secrets=false", "-s", stack]
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SpecError(
            f"Could not run `{' '.join(argv)}` ({exc}); install the Pulumi CLI and run from the "
            "project folder."
        ) from exc
    if done.returncode != 0:
        raise SpecError(
            f"`{' '.join(argv)}` failed: {done.stderr.strip() or done.stdout.strip()}. "
            f"Check the stack name with `pulumi stack ls`."
        )
    outputs = json.loads(done.stdout or "{}")
    if not isinstance(outputs, dict):
        raise SpecError(f"Stack {stack!r} printed outputs that are not an object; redeploy it.")
    return outputs


def main_compare(
    stacks: Sequence[str],
    outputs_loader: Callable[[str], Mapping[str, Any]] = read_stack_outputs,
    json_out: bool = False,
    *,
    all_flags: bool = False,
    tolerance_pct: float = 0.0,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    """The ``compare`` command: print the table (or JSON) and return the exit code for CI."""
    if len(set(stacks)) != len(stacks):
        print(f"compare: a stack is named twice in {list(stacks)}; name each stack once.", file=err)
        return EXIT_BAD_INPUT
    try:
        comparison = compare(
            {stack: outputs_loader(stack) for stack in stacks},
            all_flags=all_flags,
            tolerance_pct=tolerance_pct,
        )
    except StacksError as exc:
        print(f"compare: {exc}", file=err)
        return EXIT_BAD_INPUT
    print(to_json(comparison) if json_out else format_table(comparison), file=out)
    return comparison.exit_code
